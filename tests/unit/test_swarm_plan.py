"""The swarm's plan: its schema errors (one sentence naming the path), the cut to
max_members, and model routing in its order of precedence."""

from __future__ import annotations

from typing import Any

import pytest

from swarmdeck.swarm.plan import AgentInfo, PlanContext, PlanError, accept, cut, parse_members
from swarmdeck.swarm.routing import Routing, route
from swarmdeck.swarm.team import Team

MODELS = {"coord:m", "team:m", "agent:m", "role:m", "member:m", "plan:m", "alias:target"}


def ctx(**overrides: Any) -> PlanContext:
    base: dict[str, Any] = {
        "team": None,
        "max_members": 5,
        "routing": Routing("coord:m"),
        "code_refusal": None,
        "normalize": lambda name: name if ":" in name else f"{name}:m",
        "available": set(MODELS),
        "agents": {"helper": AgentInfo(False, "agent:m"), "sweeper": AgentInfo(True, None)},
    }
    return PlanContext(**{**base, **overrides})


def m(role: str, mode: str | None = "explore", **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"role": role, "task": f"{role}'s task", **extra}
    if mode is not None:
        doc["mode"] = mode
    return doc


def error_of(raw: Any, context: PlanContext | None = None) -> str:
    with pytest.raises(PlanError) as caught:
        accept(raw, context or ctx(), "model")
    return str(caught.value)


def test_schema_errors_name_the_path() -> None:
    assert error_of("not a list") == "plan: must be a list of members, got str"
    assert error_of([]) == "plan: has no members; give at least one"
    assert error_of([m("a"), 3]) == "plan[1]: must be an object, got int"
    assert error_of([{"role": "a", "mode": "explore"}]) == "plan[0].task: Field required"
    assert error_of([m("a", mode="write")]).startswith("plan[0].mode: Input should be 'code'")
    assert error_of([m("a b/c")]).startswith("plan[0].role: String should match pattern")
    assert error_of([m("a", mode=None)]) == (
        "plan[0].mode: required field is missing (one of code, explore, test, review)"
    )
    assert error_of([m("a"), m("a")]) == (
        "plan[1].role: 'a' appears twice; give each member its own role (e.g. a-2)"
    )
    assert error_of([m("a", depends_on=["b"])]) == (
        "plan[0].depends_on[0]: 'b' is not a role of this plan (roles: a)"
    )
    assert error_of([m("a", depends_on=["a"])]) == (
        "plan[0].depends_on[0]: a member cannot depend on itself"
    )
    cycle = error_of([m("a", depends_on=["c"]), m("b", depends_on=["a"]), m("c", depends_on=["b"])])
    assert cycle == "plan[0].depends_on: a cycle: a -> c -> b -> a"


def test_context_errors() -> None:
    refused = ctx(code_refusal="/tmp/x is not in a git repository")
    assert error_of([m("a", mode="code")], refused) == (
        "plan[0].mode: code members need a clean git repository, and /tmp/x is not in a git "
        "repository; use explore, test or review"
    )
    assert error_of([m("a", agent="ghost")]) == (
        "plan[0].agent: no agent named 'ghost' (known: helper)"
    )
    assert error_of([m("a", agent="sweeper")]) == (
        "plan[0].agent: sweeper is a system agent and never a member"
    )
    assert error_of([m("a", model="nope:x")]) == (
        "plan[0].model: model 'nope:x' (from plan) is not available; name one of: "
        + ", ".join(sorted(MODELS))
    )
    unready = ctx(routing=Routing("coord:m", member_model="gone:m"))
    assert error_of([m("a")], unready).startswith(
        "plan[0]: model 'gone:m' (from settings swarm.member_model) is not available"
    )


def test_a_list_or_an_object_with_members() -> None:
    assert [p.role for p in parse_members({"members": [m("a")]}, None)] == ["a"]
    assert [p.role for p in parse_members([m("a"), m("b")], None)] == ["a", "b"]


def test_the_team_fills_in_modes() -> None:
    team = Team.model_validate({"name": "t", "members": [{"role": "sec", "mode": "review"}]})
    [member] = parse_members([m("sec", mode=None)], team)
    assert member.mode == "review"


def test_cut_keeps_the_first_and_drops_what_depends_on_the_cut() -> None:
    members = parse_members(
        [m("a"), m("b"), m("c"), m("d", depends_on=["c"]), m("e", depends_on=["a"])], None
    )
    kept, dropped = cut(members, 3)
    assert [k.role for k in kept] == ["a", "b", "c"]
    assert dropped == [
        {"role": "d", "task": "d's task", "reason": "over the limit of 3 members (max_members)"},
        {"role": "e", "task": "e's task", "reason": "over the limit of 3 members (max_members)"},
    ]
    kept, dropped = cut(members, 2)
    assert [k.role for k in kept] == ["a", "b"]
    assert [(d["role"], d["reason"]) for d in dropped] == [
        ("c", "over the limit of 2 members (max_members)"),
        ("d", "it depends on c, which was dropped"),
        ("e", "over the limit of 2 members (max_members)"),
    ]


def test_routing_order() -> None:
    routing = Routing("coord:m", "member:m", {"sec": "role:m"}, {"fast": "alias:target"})
    assert route("sec", "plan:m", "team:m", "agent:m", routing) == ("plan:m", "plan")
    assert route("sec", None, "team:m", "agent:m", routing) == ("team:m", "team")
    assert route("sec", None, None, "agent:m", routing) == ("agent:m", "agent")
    assert route("sec", None, None, None, routing) == ("role:m", "settings swarm.role_models")
    assert route("other", None, None, None, routing) == (
        "member:m",
        "settings swarm.member_model",
    )
    assert route("other", None, None, None, Routing("coord:m")) == ("coord:m", "coordinator")
    assert route("x", "fast", None, None, routing) == ("alias:target", "plan")  # aliases last


def test_accept_routes_and_completes_each_member() -> None:
    team = Team.model_validate(
        {
            "name": "t",
            "members": [
                {
                    "role": "sec",
                    "mode": "review",
                    "model": "team:m",
                    "system_prompt": "SEC",
                    "tools": ["read_file", "bash"],
                    "timeout": 30,
                },
                {"role": "help", "mode": "explore", "agent": "helper"},
            ],
        }
    )
    routing = Routing("coord:m", "member:m", {}, {"fast": "alias:target"})
    plan = accept(
        [m("sec", mode=None), m("help", mode=None), m("solo", model="fast")],
        ctx(team=team, routing=routing),
        "model",
    )
    sec, helper, solo = plan["members"]
    assert (sec["model"], sec["model_from"], sec["system_prompt"], sec["timeout"]) == (
        "team:m",
        "team",
        "SEC",
        30,
    )
    assert sec["tools"] == ["read_file", "shell"]  # PilotSwarm's names resolved
    assert (helper["agent"], helper["model"], helper["model_from"]) == (
        "helper",
        "agent:m",
        "agent",
    )
    assert (solo["model"], solo["model_from"]) == ("alias:target", "plan")
    assert [x["index"] for x in plan["members"]] == [0, 1, 2]
    assert plan["source"] == "model" and plan["dropped"] == []
