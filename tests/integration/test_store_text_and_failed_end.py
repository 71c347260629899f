"""Text survives any character a model sends, on both stores (NUL is escaped, the same way
on each, and read back exactly); and a catalog write that fails at a session's end ends it
`failed` with the error, never leaves it `running`, and `sessions resume` then ends it."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from swarmdeck.catalog import schema
from swarmdeck.catalog.direct import DirectCatalog
from swarmdeck.catalog.nul_text import ESCAPE, SESSION_TEXT_COLUMNS, escape_nul, unescape_nul
from swarmdeck.catalog.schema import NulSafeText
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, open_catalog, text

NASTY = f"before\x00after, an escape {ESCAPE}0 and {ESCAPE}{ESCAPE}, a NUL again\x00"


@given(st.text())
def test_escaping_is_exact_and_leaves_no_nul(value: str) -> None:
    stored = escape_nul(value)
    assert "\x00" not in stored
    assert unescape_nul(stored) == value


def test_text_without_nul_or_escape_is_stored_as_it_is() -> None:
    assert (
        escape_nul("plain text\nwith lines\\0 and \\u0000")
        == "plain text\nwith lines\\0 and \\u0000"
    )


def test_a_model_that_sends_nul_completes_with_its_exact_text(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"say": Agent([text(NASTY)])}))
    res = run_cli(sd_home, "run", "say something odd", "-m", "fake", "-C", str(workdir))
    assert res.code == 0, res.stderr
    assert res.stdout == NASTY + "\n"
    catalog = open_catalog()
    [session] = catalog.list_sessions()
    assert (session.status, session.final_text) == ("completed", NASTY)
    [turn] = catalog.events(session.id, kinds=["assistant"])
    assert turn.payload["text"] == NASTY
    shown = run_cli(sd_home, "sessions", "show", session.id, "--json")
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["final_text"] == NASTY


def test_every_free_text_column_holds_nul_on_both_stores(store: Store, sd_home: Path) -> None:
    catalog = open_catalog()
    record = catalog.create_session(
        session_id="s1",
        model="fake",
        mode="agent",
        workdir=str(sd_home),
        run_dir=str(sd_home),
        task=NASTY,
        title=NASTY,
        system_message=NASTY,
    )
    catalog.update_session(record.id, final_text=NASTY, error=NASTY)
    catalog.set_status(record.id, "running", error=NASTY + "!")
    again = catalog.get_session(record.id)
    assert (again.task, again.title, again.system_message, again.final_text) == (NASTY,) * 4
    assert again.error == NASTY + "!"
    # Stored the same way on both stores: escaped, without a NUL.
    with catalog.engine.connect() as conn:
        raw = conn.execute(sa.text("SELECT final_text FROM sd_sessions WHERE id = 's1'")).scalar()
    assert raw == escape_nul(NASTY) and "\x00" not in raw


def test_the_fleet_paths_bare_driver_stores_and_reads_the_same_text(
    store: Store, sd_home: Path
) -> None:
    # dispatch's fleet path hands sessions over and follows them without SQLAlchemy: it
    # must escape and read back exactly what the catalog does.
    catalog = open_catalog()
    direct = DirectCatalog(store.url)
    row = {
        "id": "s2", "parent_id": None, "root_id": "s2", "depth": 0, "agent": None,
        "model": "fake", "mode": "explore", "workdir": str(sd_home), "run_dir": str(sd_home),
        "title": NASTY, "system_message": NASTY, "tool_names": None, "options": {},
    }  # fmt: skip
    try:
        direct.hand_over(row, NASTY)
        stored = catalog.get_session("s2")
        assert (stored.task, stored.title, stored.system_message) == (NASTY,) * 3
        catalog.update_session("s2", final_text=NASTY, error=NASTY + "!")
        read = direct.get_session("s2")
        assert (read.task, read.title, read.final_text, read.error) == (
            NASTY,
            NASTY,
            NASTY,
            NASTY + "!",
        )
    finally:
        direct.close()
    text_columns = {c.name for c in schema.sessions.columns if isinstance(c.type, NulSafeText)}
    assert set(SESSION_TEXT_COLUMNS) == text_columns


POISON_SQLITE = """
CREATE TRIGGER poison BEFORE UPDATE OF final_text ON sd_sessions
WHEN instr(NEW.final_text, 'POISON') > 0
BEGIN SELECT RAISE(ABORT, 'the store refused this final text'); END
"""
POISON_POSTGRES = [
    """
    CREATE FUNCTION poison() RETURNS trigger AS $$
    BEGIN
        IF strpos(NEW.final_text, 'POISON') > 0 THEN
            RAISE EXCEPTION 'the store refused this final text';
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    "CREATE TRIGGER poison BEFORE UPDATE ON sd_sessions FOR EACH ROW EXECUTE FUNCTION poison()",
]


def poison_the_store(store: Store, on: bool) -> None:
    """A real write failure of the store: a trigger that refuses some final texts."""
    catalog = open_catalog()
    with catalog.engine.begin() as conn:
        if not on:
            conn.exec_driver_sql(
                "DROP TRIGGER poison" + ("" if not store.is_postgres else " ON sd_sessions")
            )
        elif store.is_postgres:
            for statement in POISON_POSTGRES:
                conn.exec_driver_sql(statement)
        else:
            conn.exec_driver_sql(POISON_SQLITE)


def test_a_failing_write_at_the_end_ends_the_session_failed_then_resume_ends_it(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted({"answer": Agent([text("the POISON answer")])})
    fake_llm.set_script(script)
    open_catalog()  # creates the tables the trigger goes on
    poison_the_store(store, on=True)
    res = run_cli(sd_home, "run", "answer me", "-m", "fake", "-C", str(workdir))
    assert res.code == 3, res.stderr
    assert "Traceback" not in res.stderr and "[SQL:" not in res.stderr
    catalog = open_catalog()
    [session] = catalog.list_sessions()
    assert session.status == "failed"
    error = session.error or ""
    assert "the store refused this final text" in error and "\n" not in error
    assert "[SQL:" not in error and "POISON" not in error  # not the statement nor its values
    assert session.final_text in ("", None)

    poison_the_store(store, on=False)  # the store is fixed
    resumed = run_cli(sd_home, "sessions", "resume", session.id)
    assert resumed.code == 0, resumed.stderr
    assert resumed.stdout.strip() == "the POISON answer"
    final = catalog.get_session(session.id)
    assert (final.status, final.final_text) == ("completed", "the POISON answer")
    # The model had answered: its stored turn ends the session, it is not asked again.
    assert script.asked == {"answer": 1}
