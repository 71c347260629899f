"""Typed errors. Every error a user can cause carries a one-line message and a hint."""

from __future__ import annotations


class SwarmdeckError(Exception):
    """Base of every error swarmdeck raises on purpose; the CLI prints it in one line."""

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and hint as a single line for humans."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(SwarmdeckError):
    """A config or provider file is missing, unreadable or invalid."""


class UnknownProviderError(ConfigError):
    """A `provider:model` name names no configured provider."""


class MissingKeyError(ConfigError):
    """A provider needs a key and none is stored."""


class StoreError(SwarmdeckError):
    """The home or the store cannot be used: missing, not a directory, read-only, corrupt,
    or a server that does not answer. Nothing stored is touched."""


class CredentialError(SwarmdeckError):
    """The credential store refused an operation (bad permissions, unknown key)."""


class UsageError(SwarmdeckError):
    """The command line or SDK call was used wrongly (bad workdir, bad flag mix)."""


class TaskRefusedError(SwarmdeckError):
    """A guard refused a task before anything was sent to a model."""


class NotFoundError(SwarmdeckError):
    """A session, artifact or other stored thing does not exist."""


class ProviderError(SwarmdeckError):
    """A provider call failed. `retryable` says whether trying again can help; `kind` names
    the failure (see models/errors.py) for whoever must react to one in particular."""

    def __init__(
        self,
        message: str,
        hint: str = "",
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        kind: str = "failed",
    ) -> None:
        super().__init__(message, hint)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.kind = kind


class ToolError(SwarmdeckError):
    """A tool call failed; the message is shown to the model."""


class PermissionDeniedError(ToolError):
    """A tool call was refused by the mode policy or the sandbox."""


class BudgetExceededError(SwarmdeckError):
    """A session ran out of turns, tokens or money."""
