"""Shortest unique prefixes: each names its id alone, as short as that allows, and never
what `resolve_session_id` would read as a system agent's name."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from swarmdeck.views.prefixes import MIN_PREFIX, shortest_prefixes

hex_ids = st.lists(st.text("0123456789abcdef.", min_size=1, max_size=24), max_size=60)


@given(hex_ids)
def test_each_prefix_names_its_id_alone_and_is_as_short_as_that_allows(ids: list[str]) -> None:
    found = shortest_prefixes(ids)
    assert set(found) == set(ids)
    for sid, prefix in found.items():
        assert sid.startswith(prefix)
        assert len(prefix) >= min(MIN_PREFIX, len(sid))
        # Unique, or the whole id (which resolves exactly even when another id extends it).
        others = [o for o in ids if o != sid and o.startswith(prefix)]
        assert not others or prefix == sid
        # One character less would be ambiguous, or shorter than the minimum.
        if len(prefix) > MIN_PREFIX and prefix != sid:
            shorter = prefix[:-1]
            assert any(o != sid and o.startswith(shorter) for o in ids)


def test_time_sorted_ids_share_a_head_and_differ_at_the_tail() -> None:
    ids = ["18f0000000100aaaa", "18f0000000100bbbb", "18f0000000200cccc"]
    assert shortest_prefixes(ids) == {
        "18f0000000100aaaa": "18f0000000100a",
        "18f0000000100bbbb": "18f0000000100b",
        "18f0000000200cccc": "18f00000002",
    }


def test_a_prefix_that_is_a_system_agents_name_is_made_longer() -> None:
    found = shortest_prefixes(["beef01aa", "sys-beef"], min_len=4)
    # `beef` would resolve to sys-beef (resolve_session_id tries that first).
    assert found["beef01aa"] == "beef0"
    assert found["sys-beef"] == "sys-beef"
