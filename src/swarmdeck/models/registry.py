"""The provider registry: packaged provider files, overridden by the user's, and `provider:model`."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from swarmdeck.errors import ConfigError, UnknownProviderError
from swarmdeck.models.edit_shapes import EditShape

Quirk = Literal[
    "reasoning_echo",  # send `reasoning_content` back on assistant messages (DeepSeek, Kimi)
    "tool_choice_auto_only",  # only `tool_choice: "auto"` is accepted (GLM)
    "no_stream_usage",  # the endpoint rejects `stream_options.include_usage`
    "max_completion_tokens",  # the output cap is `max_completion_tokens`, not `max_tokens` (OpenAI)
]

LS_HINT = "run `swarmdeck provider ls`"
# The tool searches each wire format's vendor runs on its server, its default first.
VENDOR_SEARCHES: dict[str, tuple[Literal["bm25", "regex", "hosted"], ...]] = {
    "openai": (),
    "anthropic": ("bm25", "regex"),
    "openai-responses": ("hosted",),
}
# The default wait for the first byte of an answer (`run --help` states it too).
FIRST_BYTE_TIMEOUT_S = 120.0
PACKAGED_DIR = "providers"
# The shortest prefix OpenAI's and Anthropic's prompt caches keep (their smaller models';
# some larger ones keep only longer ones).
VENDOR_CACHE_MIN_TOKENS = 1024


class ProviderConfig(BaseModel):
    """One provider: where it lives, which models it serves, and how hard we may call it."""

    # Frozen so a config can key dicts and nobody re-routes a provider at run time.
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=64)
    # The wire format: Chat Completions (`openai`, and every compatible server), the
    # Anthropic Messages API, or OpenAI's Responses API (`openai-responses`).
    kind: Literal["openai", "anthropic", "openai-responses"]
    base_url: str = Field(pattern=r"^https?://\S+$")
    model: str = Field(min_length=1)
    models: tuple[str, ...] = ()
    display_name: str = ""
    context_tokens: int = Field(default=128_000, gt=0)
    output_tokens: int = Field(default=8192, gt=0)
    # Past this share of the window (less the output's room) the older turns are summarized.
    compact_at: float = Field(default=0.75, ge=0.1, le=1.0)
    concurrency: int = Field(default=4, ge=1, le=1024)
    rpm: int | None = Field(default=None, ge=1)
    needs_key: bool = True
    network: bool = False
    quirks: tuple[Quirk, ...] = ()
    retry_after_cap_s: float = Field(default=60.0, ge=0)
    max_attempts: int = Field(default=5, ge=1, le=50)
    # Read timeout of one call; also how long a crashed caller's limiter slot stays taken.
    timeout_s: float = Field(default=600.0, gt=0)
    # How long one request may wait for the first byte of its answer: an endpoint that
    # takes the request and never answers fails this soon, not after timeout_s.
    first_byte_timeout_s: float = Field(default=FIRST_BYTE_TIMEOUT_S, gt=0)
    # A scripted model (the demo's): a packaged script of swarmdeck.testing, served by a
    # fake server on loopback that each process calling it starts on demand (models/
    # scripted.py); base_url is then only the loopback host it binds.
    script: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    # The shape of the edit tools (models/edit_shapes.py); None: the vendor's default.
    edit_tools: EditShape | None = None
    # What runs a dispatch on this provider: the built-in loop, or an external runner
    # (`opencode`, `claude`, `codex`; runners/), as pilot-workers' provider files name it.
    runner: Literal["swarmdeck", "opencode", "claude", "codex"] = "swarmdeck"
    # Tools on demand through the vendor's own tool search (Anthropic: deferred tools found
    # by its server-side `bm25` or `regex` search; OpenAI's Responses API: its `hosted`
    # one); `off`, or an openai (Chat Completions) provider, loads them with swarmdeck's
    # load_tools instead. None: the vendor's default (bm25 on Anthropic, hosted on
    # Responses).
    tool_search: Literal["bm25", "regex", "hosted", "off"] | None = None
    # The shortest prompt prefix the provider's prompt cache keeps, in tokens: a family's
    # shared prefix (runtime/family.py) shorter than this is filled up to it with schemas it
    # would index, since below it every sibling pays full price for all of it. None: the
    # vendor's (1,024 on Anthropic and api.openai.com; 0, no filling, elsewhere: vLLM,
    # llama.cpp and DeepSeek cache short prefixes).
    prompt_cache_min_tokens: int | None = Field(default=None, ge=0, le=65_536)

    @field_validator("base_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @model_validator(mode="after")
    def _default_model_allowed(self) -> ProviderConfig:
        if self.models and self.model not in self.models:
            raise ValueError(f"default model {self.model!r} is not in models {list(self.models)}")
        return self

    @model_validator(mode="after")
    def _tool_search_of_the_vendor(self) -> ProviderConfig:
        if self.tool_search in (None, "off") or self.tool_search in VENDOR_SEARCHES[self.kind]:
            return self
        if self.kind == "openai":
            raise ValueError(
                "tool_search is the Anthropic Messages API's and the OpenAI Responses API's; "
                "an openai (Chat Completions) provider loads tools with load_tools (remove "
                "tool_search, or use kind openai-responses)"
            )
        allowed = ", ".join([*VENDOR_SEARCHES[self.kind], "off"])
        raise ValueError(f"tool_search of a {self.kind} provider is one of: {allowed}")

    @property
    def vendor_tool_search(self) -> Literal["bm25", "regex", "hosted"] | None:
        """The vendor's tool search this provider defers tools to, or None (load_tools)."""
        searches = VENDOR_SEARCHES[self.kind]
        if not searches or self.tool_search == "off":
            return None
        return self.tool_search or searches[0]

    @property
    def cache_min_tokens(self) -> int:
        """The shortest prefix the provider's prompt cache keeps (0: any, or unknown)."""
        if self.prompt_cache_min_tokens is not None:
            return self.prompt_cache_min_tokens
        if self.kind != "openai" or urlsplit(self.base_url).hostname == "api.openai.com":
            return VENDOR_CACHE_MIN_TOKENS
        return 0

    def has_quirk(self, quirk: Quirk) -> bool:
        """True when this provider needs the given vendor workaround."""
        return quirk in self.quirks

    @property
    def label(self) -> str:
        """Display name, or the key when none is set."""
        return self.display_name or self.key


@dataclass(frozen=True)
class _Entry:
    """A loaded provider and where it came from (a user file path, or None when packaged)."""

    config: ProviderConfig
    user_file: Path | None
    packaged: bool


class ProviderRegistry:
    """All known providers by key; routing is fixed per provider."""

    def __init__(self, entries: dict[str, _Entry]) -> None:
        self._entries = dict(sorted(entries.items()))

    @classmethod
    def load(cls, user_dir: Path) -> ProviderRegistry:
        """Packaged provider files, then `<user_dir>/*.yaml` replacing those with the same key."""
        entries: dict[str, _Entry] = {}
        for config in _packaged_configs():
            entries[config.key] = _Entry(config, None, packaged=True)
        for path, config in _user_configs(user_dir):
            was_packaged = config.key in entries and entries[config.key].packaged
            entries[config.key] = _Entry(config, path, packaged=was_packaged)
        return cls(entries)

    def get(self, key: str) -> ProviderConfig:
        """The provider with this key, or UnknownProviderError listing the known ones."""
        entry = self._entries.get(key)
        if entry is None:
            known = ", ".join(self._entries) or "none"
            raise UnknownProviderError(f"unknown provider {key!r} (known: {known})", LS_HINT)
        return entry.config

    def all(self) -> list[ProviderConfig]:
        """Every provider, sorted by key."""
        return [entry.config for entry in self._entries.values()]

    def source(self, key: str) -> str:
        """Where a provider is defined: "packaged" or the user file's path."""
        self.get(key)
        entry = self._entries[key]
        return str(entry.user_file) if entry.user_file else "packaged"

    def resolve(self, name: str) -> tuple[ProviderConfig, str]:
        """`provider:model` (or bare `provider`, its default model) to the config and model name."""
        # Split at the first colon only: model names such as `qwen3:8b` contain one.
        key, _, model = name.strip().partition(":")
        config = self.get(key)
        model = model or config.model
        if config.models and model not in config.models:
            allowed = ", ".join(config.models)
            raise UnknownProviderError(
                f"provider {key!r} does not serve model {model!r} (allowed: {allowed})", LS_HINT
            )
        return config, model

    def register(self, config: ProviderConfig) -> None:
        """Add a provider for this process only (the demo's scripted model, benchmarks)."""
        self._entries[config.key] = _Entry(config, None, packaged=False)

    def add(self, config: ProviderConfig, user_dir: Path) -> Path:
        """Write `<user_dir>/<key>.yaml` (replacing any user file of that key) and register it."""
        path = user_dir / f"{config.key}.yaml"
        _write_atomically(path, _to_yaml(config))
        old = self._entries.get(config.key)
        self._entries[config.key] = _Entry(config, path, packaged=bool(old and old.packaged))
        self._entries = dict(sorted(self._entries.items()))
        return path

    def remove(self, key: str, user_dir: Path) -> None:
        """Delete the user file of a provider; a packaged provider falls back to its default."""
        entry = self._entries.get(key)
        path = user_dir / f"{key}.yaml"
        if not path.exists():
            if entry is None:
                self.get(key)
            raise ConfigError(
                f"provider {key!r} is packaged and cannot be removed",
                "override it with a user file instead: `swarmdeck provider add`",
            )
        path.unlink()
        if entry is not None and entry.packaged:
            packaged = {c.key: c for c in _packaged_configs()}
            self._entries[key] = _Entry(packaged[key], None, packaged=True)
        else:
            self._entries.pop(key, None)


def _packaged_files() -> Iterator[Traversable]:
    """The provider YAML files shipped inside the package."""
    folder = resources.files("swarmdeck.models").joinpath(PACKAGED_DIR)
    yield from sorted(
        (f for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name
    )


def _packaged_configs() -> list[ProviderConfig]:
    """Every packaged provider; a broken packaged file is a ConfigError like any other."""
    return [
        _parse(f.read_text(encoding="utf-8"), f"{PACKAGED_DIR}/{f.name}", f.name)
        for f in _packaged_files()
    ]


def _user_configs(user_dir: Path) -> list[tuple[Path, ProviderConfig]]:
    """Every `<user_dir>/*.yaml`, each validated; a missing dir means no user providers."""
    if not user_dir.is_dir():
        return []
    configs = []
    for path in sorted(user_dir.glob("*.yaml")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"{path}: cannot read: {exc.strerror}", "check its permissions"
            ) from None
        configs.append((path, _parse(text, str(path), path.name)))
    return configs


def _parse(text: str, label: str, file_name: str) -> ProviderConfig:
    """Validate one provider file; errors name the file and the field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{label}: invalid YAML: {detail}", "fix the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: must be a mapping of provider fields", "fix the file")
    stem = file_name.removesuffix(".yaml")
    data.setdefault("key", stem)
    try:
        config = ProviderConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{label}: {_describe(exc)}", "fix the file") from None
    if config.key != stem:
        raise ConfigError(
            f"{label}: field 'key': {config.key!r} does not match the file name",
            f"rename the file to {config.key}.yaml",
        )
    return config


def _describe(exc: ValidationError) -> str:
    """Pydantic errors as `field 'x': message` phrases on one line."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        parts.append(f"field '{where}': {message}" if where else message)
    return "; ".join(parts)


def _to_yaml(config: ProviderConfig) -> str:
    """A provider as the YAML a user would write, defaults left out."""
    data: dict[str, Any] = config.model_dump(mode="json", exclude_defaults=True)
    # Required fields first so the file reads like the packaged ones.
    head = {k: data.pop(k) for k in ("key", "kind", "base_url", "model") if k in data}
    return yaml.safe_dump({**head, **data}, sort_keys=False, allow_unicode=True)


def _write_atomically(path: Path, text: str) -> None:
    """Write via a temp file and rename, so a crash never leaves half a provider file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
