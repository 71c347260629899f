"""Team templates: a swarm's roles, their models and modes, its limits and recovery policy.

YAML files (`name`, `description`, `members: [{role, model, mode, agent, system_prompt,
tools}]`, `coordinator_model`, `max_timeout`, `recovery`), and llmcode's JSON team files as
they are (their members' `backend` is kept and shown, never used: members are durable
sessions here). Tiers, the later winning on a name: the packaged teams, the user's
(`<home>/teams/`), the project's (`<workdir>/.swarmdeck/teams/`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from swarmdeck.errors import ConfigError, NotFoundError, UsageError
from swarmdeck.plugins.aliases import resolve_tools

TEAM_SUFFIXES = (".yaml", ".yml", ".json")
TEAMS_DIR = "teams"
PROJECT_TEAMS = Path(".swarmdeck") / "teams"
MEMBER_MODES = ("code", "explore", "test", "review")
DEFAULT_MAX_TIMEOUT_S = 1800.0
ROLE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,39}$"


def first_problem(exc: ValidationError) -> str:
    """A pydantic error as `where: what`."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


class RecoveryPolicy(BaseModel):
    """What the coordinator does when a member fails: retry it, then abort, continue or
    reassign. llmcode's field names (`retry_delay_sec`) are read too."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    max_retries: int = Field(2, ge=0, le=10)
    retry_delay: float = Field(
        5.0, ge=0, le=3600, validation_alias=AliasChoices("retry_delay", "retry_delay_sec")
    )
    on_all_failed: Literal["abort", "continue", "reassign"] = "abort"
    # For reassign: a role of the team, or a provider:model (default: the coordinator's
    # model, or else another role of the same mode).
    reassign_to: str | None = None


class TeamMember(BaseModel):
    """One role of a team."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(pattern=ROLE_PATTERN)
    model: str = ""
    mode: Literal["code", "explore", "test", "review"] | None = None
    agent: str | None = None
    system_prompt: str = ""
    tools: list[str] | None = None
    description: str = ""
    timeout: float | None = Field(None, gt=0)
    # llmcode's process backend (tmux, subprocess, worktree): read, shown, not used.
    backend: str = ""


class Team(BaseModel):
    """A team template."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    description: str = ""
    members: list[TeamMember] = Field(min_length=1)
    coordinator_model: str = ""
    max_timeout: float = Field(DEFAULT_MAX_TIMEOUT_S, gt=0)
    member_timeout: float | None = Field(None, gt=0)
    recovery: RecoveryPolicy = Field(default_factory=RecoveryPolicy)

    @model_validator(mode="after")
    def _roles_unique(self) -> Team:
        seen: set[str] = set()
        for i, member in enumerate(self.members):
            if member.role in seen:
                raise ValueError(f"members[{i}].role: {member.role!r} appears twice")
            seen.add(member.role)
            if member.tools is not None:
                member.tools = resolve_tools(member.tools)
        target = self.recovery.reassign_to
        if target and ":" not in target and target not in seen:
            raise ValueError(
                f"recovery.reassign_to: {target!r} is neither a role of the team nor a "
                "provider:model"
            )
        return self

    def role(self, name: str) -> TeamMember | None:
        """The member of that role, or None."""
        return next((m for m in self.members if m.role == name), None)

    def notes(self) -> list[str]:
        """What in the file swarmdeck reads but does not use."""
        return [
            f"{m.role}: backend {m.backend!r} is ignored (members are durable sessions)"
            for m in self.members
            if m.backend
        ]


@dataclass(frozen=True)
class TeamFile:
    """A team and where it came from."""

    team: Team
    path: Path
    tier: str  # packaged, user, project or file


def parse_team(path: Path) -> Team:
    """Read and validate one team file; ConfigError naming the file and the first problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read team file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise ConfigError(f"team file {path} does not parse: {detail}", "fix the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"team file {path} must be a mapping with name and members")
    try:
        return Team.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"team file {path}: {first_problem(exc)}", "fix the file") from None


def _packaged_dir() -> Path:
    return Path(str(files("swarmdeck.swarm") / "teams"))


def tier_dirs(home: Path, workdir: Path | None) -> list[tuple[str, Path]]:
    """The folders teams are read from, the later winning on a name."""
    tiers = [("packaged", _packaged_dir()), ("user", home / TEAMS_DIR)]
    if workdir is not None:
        tiers.append(("project", workdir / PROJECT_TEAMS))
    return tiers


def list_teams(home: Path, workdir: Path | None = None) -> list[TeamFile]:
    """Every team of every tier, by name (a later tier's replaces an earlier one's)."""
    found: dict[str, TeamFile] = {}
    for tier, folder in tier_dirs(home, workdir):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix in TEAM_SUFFIXES and path.is_file():
                team = parse_team(path)
                found[team.name] = TeamFile(team, path, tier)
    return [found[name] for name in sorted(found)]


def load_team(ref: str, home: Path, workdir: Path | None = None) -> TeamFile:
    """A team by name (any tier) or by the path of its file."""
    path = Path(ref).expanduser()
    if path.suffix in TEAM_SUFFIXES and (path.is_file() or os.sep in ref):
        if not path.is_file():
            raise UsageError(f"team file not found: {path}", "check the path")
        return TeamFile(parse_team(path), path.resolve(), "file")
    teams = list_teams(home, workdir)
    for entry in teams:
        if entry.team.name == ref:
            return entry
    known = ", ".join(t.team.name for t in teams) or "none"
    raise NotFoundError(f"no team named {ref!r} (known: {known})", "`swarmdeck team ls` lists them")


def save_team(source: Path, home: Path, *, force: bool = False) -> TeamFile:
    """Copy a valid team file into the user's teams, under its name (the text as it is, so
    an llmcode JSON file stays one)."""
    if not source.is_file():
        raise UsageError(f"team file not found: {source}", "check the path")
    if source.suffix not in TEAM_SUFFIXES:
        raise UsageError(f"{source} is not a team file", f"use one of: {', '.join(TEAM_SUFFIXES)}")
    team = parse_team(source)
    folder = home / TEAMS_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = [p for p in (folder / f"{team.name}{s}" for s in TEAM_SUFFIXES) if p.exists()]
    if existing and not force:
        raise UsageError(
            f"a team named {team.name} is saved already ({existing[0]})",
            "pass --force to replace it",
        )
    for old in existing:
        old.unlink()
    target = folder / f"{team.name}{'.yaml' if source.suffix == '.yml' else source.suffix}"
    target.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    return TeamFile(team, target, "user")


def remove_team(name: str, home: Path) -> Path:
    """Remove the user's team of that name; a packaged one cannot be removed."""
    folder = home / TEAMS_DIR
    for suffix in TEAM_SUFFIXES:
        path = folder / f"{name}{suffix}"
        if path.is_file() and parse_team(path).name == name:
            path.unlink()
            return path
    packaged = [t for t in list_teams(home) if t.team.name == name and t.tier == "packaged"]
    if packaged:
        raise UsageError(
            f"{name} is a packaged team and cannot be removed",
            "save a team of the same name to replace it for you",
        )
    raise NotFoundError(f"no saved team named {name!r}", "`swarmdeck team ls` lists them")


def team_doc(team: Team) -> dict[str, Any]:
    """The team as plain data (what a coordinator session keeps in its options)."""
    return team.model_dump(mode="json")
