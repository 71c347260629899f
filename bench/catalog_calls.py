"""CPU per call of the catalog calls a session makes every turn or wait, against the same
SQL sent through the bare driver (sqlite3, or psycopg) in the same run.

Each call runs N times on a fresh store holding 200 sessions, on one thread, so the CPU
time (time.process_time) is the call's own: SQLAlchemy's statement handling, the driver,
the database (in process on SQLite; a network round trip on PostgreSQL, whose server CPU is
not counted). The bare peer runs the SQL SQLAlchemy emitted for the call, prepared once by
the driver, with the same parameters: what the call would cost with no layer above the
driver. The ratio is what the catalog's layer costs on top.

    python bench/catalog_calls.py [--calls 4000] [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from quick import parse_with_quick

from swarmdeck.catalog.catalog import Catalog

SESSIONS = 200
INBOX = ["user", "child_update"]
# The event key of the one call whose SQL is captured for the bare peer.
CAPTURE_KEY = "captured"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=4000)
    p.add_argument("--store", default=None, help="postgresql://... (default: a fresh SQLite file)")
    return parse_with_quick(p, calls=20)


def cpu_us(fn: Callable[[int], Any], n: int) -> float:
    """CPU microseconds per call of fn(0..n-1), after a warm-up call (fn(n))."""
    fn(n)
    start = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - start) / n * 1e6


class Emitted:
    """The SQL statements (and parameters) SQLAlchemy sends while a call runs."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.statements: list[tuple[str, Any]] = []
        sa.event.listen(engine, "before_cursor_execute", self._seen)

    def stop(self) -> None:
        """Stop listening."""
        sa.event.remove(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, conn: Any, cursor: Any, sql: str, params: Any, *args: Any) -> None:
        if not sql.startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            self.statements.append((sql, params))


def bare_cpu_us(
    engine: sa.Engine, statements: list[tuple[str, Any]], writes: bool, n: int
) -> float:
    """cpu_us of the statements on one raw driver connection, in one transaction (committed
    when the call writes). The event key the call was captured with becomes a fresh one
    each run: a repeated key would cost a refused insert instead."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()

        def run(i: int) -> None:
            for sql, params in statements:
                cursor.execute(sql, _fresh_key(params, f"{CAPTURE_KEY}-{i}"))
                if cursor.description:
                    cursor.fetchall()
            if writes:
                raw.commit()
            else:
                raw.rollback()

        return cpu_us(run, n)
    finally:
        raw.close()


def _fresh_key(params: Any, key: str) -> Any:
    """The parameters with the captured event key replaced (positional or named)."""
    if isinstance(params, dict):
        return {k: key if v == CAPTURE_KEY else v for k, v in params.items()}
    return tuple(key if v == CAPTURE_KEY else v for v in params)


def main() -> None:
    args = parse_args()
    url = args.store or f"sqlite:///{tempfile.mkdtemp(prefix='sd-calls-')}/catalog.sqlite"
    catalog = Catalog.open(url)
    for i in range(SESSIONS):
        sid = f"s{i}"
        catalog.create_session(
            session_id=sid,
            model="fake:scripted",
            mode="agent",
            workdir="/tmp/w",
            run_dir=f"/tmp/r/{sid}",
            task="bench",
            parent_id=None,
            root_id=sid,
            depth=0,
        )

    def sid(i: int) -> str:
        return f"s{i % SESSIONS}"

    def append(i: int, key: str | None = None) -> None:
        catalog.append_event(sid(i), key or f"k{i}", "notice", {"n": i})

    # (name, the call, whether it writes); i < 0 is the run whose SQL is captured
    calls: list[tuple[str, Callable[[int], Any], bool]] = [
        ("news (turn start)", lambda i: catalog.news(sid(i), 0, INBOX, f"turn:{i}"), False),
        ("pending_count (wait look)", lambda i: catalog.pending_count(sid(i), ["user"]), False),
        ("drain, nothing waiting", lambda i: catalog.drain(sid(i), f"d{i}", INBOX), False),
        ("find_session", lambda i: catalog.find_session(sid(i)), False),
        ("set_status", lambda i: catalog.set_status(sid(i), "running"), True),
        ("append_event", lambda i: append(i, CAPTURE_KEY if i < 0 else None), True),
    ]
    store = "PostgreSQL" if args.store else "SQLite (WAL, synchronous=NORMAL)"
    print(f"store: {store}; {args.calls} calls each, CPU per call on one thread")
    print(f"  {'call':<28} {'catalog us':>10} {'bare driver us':>15} {'ratio':>7}")
    ratios = []
    for name, call, writes in calls:
        ours = cpu_us(call, args.calls)
        emitted = Emitted(catalog.engine)
        call(-1)
        emitted.stop()
        bare = bare_cpu_us(catalog.engine, emitted.statements, writes, args.calls)
        ratios.append(ours / bare)
        print(f"  {name:<28} {ours:10.1f} {bare:15.1f} {ours / bare:6.2f}x")
    catalog.engine.dispose()
    print(f"catalog / bare driver, geometric mean: {statistics.geometric_mean(ratios):.2f}x")


if __name__ == "__main__":
    main()
