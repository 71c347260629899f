"""Starting a swarm: everything checked before anything is stored or sent (the team, the
models, a plan file, the workdir), then the coordinator's session request. The CLI and the
SDK both start swarms here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from swarmdeck.catalog.ids import new_session_id
from swarmdeck.dispatch.guards import check_task_text
from swarmdeck.errors import ConfigError, SwarmdeckError, UsageError
from swarmdeck.models.available import normalize
from swarmdeck.runtime.family import FAMILY_OPTION, Family
from swarmdeck.runtime.host import SessionRequest
from swarmdeck.runtime.project_docs import PROJECT_DOCS_OPTION
from swarmdeck.runtime.services import Services
from swarmdeck.runtime.session import KIND_OPTION
from swarmdeck.swarm.coordinator import run_swarm
from swarmdeck.swarm.phases import SUBMIT_PLAN, SWARM_TOOLS
from swarmdeck.swarm.plan import PlanError, accept, members_of
from swarmdeck.swarm.plan_tool import SUBMIT_PLAN_TOOL
from swarmdeck.swarm.planning import plan_context
from swarmdeck.swarm.prompts import coordinator_prompt, swarm_context
from swarmdeck.swarm.routing import Routing
from swarmdeck.swarm.settings import load_swarm_settings
from swarmdeck.swarm.spec import SPEC_OPTION, SWARM_KIND, SWARM_MODE, SwarmSpec
from swarmdeck.swarm.team import DEFAULT_MAX_TIMEOUT_S, RecoveryPolicy, Team, load_team
from swarmdeck.tools.tool_index import DEFAULT_CORE

TITLE_CHARS = 70
# The coordinator's own turns: a few plans, one merge.
COORDINATOR_MAX_TURNS = 10


def register(services: Services) -> None:
    """Let this process run swarm coordinators (any worker may take one over)."""
    services.session_drivers[SWARM_KIND] = run_swarm
    services.tools.add(SUBMIT_PLAN_TOOL)


@dataclass
class SwarmRequest:
    """What a swarm is asked to do, as the command line or the SDK gave it."""

    task: str
    workdir: Path
    team: str | None = None
    plan_file: Path | None = None
    # The plan itself (the SDK), as a plan file would hold it.
    plan: Any = None
    max_members: int | None = None
    model: str | None = None
    timeout_s: float | None = None
    no_sandbox: bool = False
    plugins: tuple[str, ...] = ()


def _code_refusal(workdir: Path) -> str | None:
    """Why a code member could not have a worktree here, or None."""
    from swarmdeck.workspace.worktrees import check_clean

    try:
        check_clean(workdir)
    except SwarmdeckError as exc:
        return exc.message
    return None


def read_plan_file(path: Path) -> Any:
    """A plan file's members (YAML or JSON: a list, or a mapping with `members`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"plan file not found: {path}", "check the --plan path") from None
    except OSError as exc:
        raise UsageError(f"cannot read plan file {path}: {exc.strerror}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise UsageError(f"plan file {path} does not parse: {detail}", "fix the file") from None


def _coordinator_model(req: SwarmRequest, team: Team | None, svc: Services, aliases: dict) -> str:
    wanted = req.model or (team.coordinator_model if team else "")
    if not wanted:
        raise UsageError(
            "the swarm needs a model for its coordinator",
            "pass --model PROVIDER:MODEL (or set coordinator_model in the team)",
        )
    return normalize(svc.providers, aliases.get(wanted, wanted))


def _check_team_models(team: Team, svc: Services, aliases: dict[str, str]) -> None:
    """Every model the team names must be one a ready provider serves."""
    ready = {m.name for m in svc.available_models()}
    for member in team.members:
        if not member.model:
            continue
        exact = normalize(svc.providers, aliases.get(member.model, member.model))
        if exact not in ready:
            provider = exact.split(":", 1)[0]
            raise ConfigError(
                f"team {team.name}: the model of role {member.role} ({exact}) is not ready",
                f"store its key: `swarmdeck key set {provider}`",
            )


def _swarm_family(docs: str, svc: Services) -> Family:
    """What the coordinator and its members share (runtime/family.py): the swarms' context,
    the project's instructions, and the tools of a code member with the swarm's own and the
    plan tool, of which a code member's core set and the plan tool are shown whole. No
    swarm's own task is in it, so every swarm run in one project shares it."""
    names = [t.name for t in svc.tools.for_mode("code", None)]
    names += [n for n in (*SWARM_TOOLS, SUBMIT_PLAN) if n not in names]
    return Family(
        system="\n\n".join(p for p in (swarm_context(), docs) if p),
        tool_names=tuple(names),
        core=(*DEFAULT_CORE["code"], SUBMIT_PLAN),
        mode="code",
    )


def prepare_swarm(req: SwarmRequest, svc: Services) -> SessionRequest:
    """The coordinator's session request, or a one-line error saying what to fix."""
    if not req.task.strip():
        raise UsageError("the task is empty", 'say what the swarm should do: swarm "TASK"')
    check_task_text(req.task, svc.redactor)
    workdir = req.workdir.expanduser()
    if not workdir.is_dir():
        raise UsageError(f"workdir does not exist: {workdir}", "pass an existing directory")
    workdir = workdir.resolve()
    settings = load_swarm_settings(svc.settings.home)
    aliases = settings.model_aliases
    found = load_team(req.team, svc.settings.home, workdir) if req.team else None
    team = found.team if found else None
    model = _coordinator_model(req, team, svc, aliases)
    if team is not None:
        _check_team_models(team, svc, aliases)
    plugins = [str(Path(p).resolve()) for p in req.plugins]
    spec = SwarmSpec(
        task=req.task,
        routing=Routing(model, settings.member_model, settings.role_models, aliases),
        max_members=req.max_members or settings.max_members,
        max_timeout=req.timeout_s or (team.max_timeout if team else DEFAULT_MAX_TIMEOUT_S),
        recovery=team.recovery if team else RecoveryPolicy(),
        team=team,
        team_source=str(found.path) if found else None,
        member_timeout=team.member_timeout if team else None,
        code_refusal=_code_refusal(workdir),
        no_sandbox=req.no_sandbox or svc.settings.no_sandbox,
        plugins=plugins,
    )
    if req.plan_file is not None or req.plan is not None:
        spec.plan = read_plan_file(req.plan_file) if req.plan_file is not None else req.plan
        where = f"--plan {req.plan_file}" if req.plan_file is not None else "the plan"
        try:
            accept(spec.plan, plan_context(spec, str(workdir), svc), "file")
        except PlanError as exc:
            raise UsageError(f"{where}: {exc}", "fix the plan") from None
        for member in members_of(spec.plan):
            # Each member's task is a task like any other: the same guards.
            try:
                check_task_text(str(member.get("task", "")), svc.redactor)
            except SwarmdeckError as exc:
                message = f"{where}: role {member.get('role')}: {exc.message}"
                raise type(exc)(message, exc.hint) from None
    code_note = (
        f"Code members cannot work here: {spec.code_refusal}. Use read-only modes only."
        if spec.code_refusal
        else ""
    )
    session_id = new_session_id()
    first_line = next((ln.strip() for ln in req.task.splitlines() if ln.strip()), "")
    docs = svc.project_docs_for(workdir)
    return SessionRequest(
        task=req.task,
        model=model,
        workdir=workdir,
        mode=SWARM_MODE,
        title=f"swarm: {first_line}"[:TITLE_CHARS],
        system_message=coordinator_prompt(str(workdir), team, spec.max_members, code_note),
        tool_names=[SUBMIT_PLAN],
        options={
            **(
                {FAMILY_OPTION: _swarm_family(docs, svc).as_option()}
                if svc.settings.shared_prefix
                else {}
            ),
            # Stored even when empty: the host reads no file again (runtime/host.py).
            PROJECT_DOCS_OPTION: docs,
            KIND_OPTION: SWARM_KIND,
            "group": session_id,
            "one_shot": True,
            "max_turns": COORDINATOR_MAX_TURNS,
            SPEC_OPTION: spec.as_options(),
            **({"plugins": plugins} if plugins else {}),
        },
        session_id=session_id,
    )
