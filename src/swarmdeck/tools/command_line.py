"""Reading a command line as the shell policy needs it: the program, the argv each wrapper
(env, nice, timeout, xargs...) would run, git's subcommand, the commands of `sh -c SCRIPT`
and of `find -exec`.

What cannot be read with certainty is refused here (an unknown wrapper option in a
read-only mode, too many wrappers, `env -S`): the policy (tools/policy.py) decides only on
what was read.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

from swarmdeck.errors import PermissionDeniedError
from swarmdeck.tools.base import WRITE_MODES

# Variables that make a program load or run another one: never set for a tool, neither by
# the environment nor by `env VAR=value` in its argv.
RUNS_ANOTHER_RE = re.compile(
    r"^(?:LD_\w+|GIT_(?:EXTERNAL_DIFF|PAGER|EDITOR|SSH\w*|ASKPASS|EXEC_PATH|CONFIG\w*|"
    r"PROXY_COMMAND|TEMPLATE_DIR|DIR|WORK_TREE)|PAGER|MANPAGER|EDITOR|VISUAL|BROWSER|"
    r"SSH_ASKPASS|PYTHON\w*|PERL5?\w*|RUBY\w*|NODE_OPTIONS|BASH_ENV|ENV|PROMPT_COMMAND|"
    r"SHELLOPTS|BASHOPTS|IFS|CDPATH)$"
)


_ASSIGNMENT_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")


# Options of each wrapper that take a separate value (so the value is not taken for the
# wrapped program).
_WRAPPER_VALUE_OPTS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid"}),
    "time": frozenset(),
    "xargs": frozenset({"-I", "-n", "-P", "-d", "-E", "-L", "-s"}),
}


# Wrapper options that would run a string we cannot inspect, or write a file.
_WRAPPER_REFUSED_OPTS: dict[str, frozenset[str]] = {
    "env": frozenset({"-S", "--split-string"}),
    "time": frozenset({"-o", "--output", "-a", "--append"}),
    "xargs": frozenset({"-a", "--arg-file"}),
}


_MAX_UNWRAP = 8


# In a read-only mode a wrapper may take only these options (anything else could be a
# value we would mistake for the wrapped program); flags take no value.
_STRICT_FLAGS: dict[str, frozenset[str]] = {
    "env": frozenset({"-i", "--ignore-environment", "-0", "--null", "--"}),
    "nice": frozenset({"--"}),
    "nohup": frozenset({"--"}),
    "timeout": frozenset({"--preserve-status", "--foreground", "-v", "--verbose", "--"}),
    "stdbuf": frozenset({"--"}),
    "time": frozenset({"-p", "-v", "--verbose", "--portability", "--"}),
    "xargs": frozenset({"-0", "--null", "-r", "--no-run-if-empty", "-t", "--verbose", "-x",
                        "--exit", "--"}),
    "ionice": frozenset({"-t", "--ignore", "--"}),
}  # fmt: skip


_STRICT_VALUE_OPTS: dict[str, frozenset[str]] = {
    **_WRAPPER_VALUE_OPTS,
    "ionice": frozenset({"-c", "--class", "-n", "--classdata"}),
    "time": frozenset({"-f", "--format"}),
}


# Options that turn an otherwise read-only command into one that writes or runs commands.
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


GIT_VALUE_OPTS = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})


_SHELL_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac",
     "in", "!", "{", "}", "time", "exec", "command", "builtin"}
)  # fmt: skip


_SHELL_PUNCT = set("();<>|&")


def program(argv: Sequence[str]) -> str:
    """The program name of `argv` (basename of argv[0])."""
    return os.path.basename(argv[0])


def denied(mode: str, what: str, why: str) -> PermissionDeniedError:
    return PermissionDeniedError(f"{what} is not allowed in {mode} mode: {why}")


def unwrap(mode: str, argv: list[str]) -> list[str]:
    """The argv a wrapper (env, nice, timeout, xargs...) would run; argv itself otherwise."""
    return unwrap_chain(mode, argv, strict=mode not in WRITE_MODES)[-1]


def unwrap_chain(mode: str, argv: list[str], *, strict: bool) -> list[list[str]]:
    """argv, then the argv each wrapper in it would run, outermost first.

    `strict` (read-only modes): a wrapper option we do not know, and any VAR=value, is
    refused. Otherwise only an assignment of a variable that runs programs is refused.
    """
    chain = [argv]
    for _ in range(_MAX_UNWRAP):
        inner = _unwrap_once(mode, argv, strict)
        if inner is None:
            return chain
        chain.append(inner)
        argv = inner
    raise denied(mode, "deeply nested wrappers", "too many levels to check")


def _unwrap_once(mode: str, argv: list[str], strict: bool) -> list[str] | None:
    """The argv the wrapper `argv` would run; None when argv is no wrapper, or is bare."""
    prog = program(argv)
    value_opts = (_STRICT_VALUE_OPTS if strict else _WRAPPER_VALUE_OPTS).get(prog)
    if value_opts is None:
        return None
    i = 1
    while i < len(argv) and (argv[i].startswith("-") or (prog == "env" and "=" in argv[i])):
        arg = argv[i]
        opt = arg.split("=", 1)[0]
        if prog == "env" and not arg.startswith("-"):
            _check_assignment(mode, arg, strict)
            i += 1
            continue
        refused = _WRAPPER_REFUSED_OPTS.get(prog, frozenset())
        if opt in refused or (prog == "env" and arg.startswith("-S")):
            raise denied(mode, f"{prog} {opt}", "its argument cannot be checked")
        known = opt in value_opts or arg in _STRICT_FLAGS.get(prog, ())
        legacy_nice = prog == "nice" and re.fullmatch(r"-\d+", arg)
        if strict and not known and not legacy_nice:
            raise denied(mode, f"{prog} {arg}", "an option swarmdeck cannot check")
        if arg == "--":
            i += 1
            break
        i += 2 if opt in value_opts and "=" not in arg else 1
    if prog == "timeout" and i < len(argv):
        i += 1  # the duration
    if i >= len(argv):
        return None  # a bare wrapper (`env` prints the environment)
    return argv[i:]


def _check_assignment(mode: str, arg: str, strict: bool) -> None:
    """Refuse `VAR=value` in argv: always in a read-only mode; elsewhere for a variable that
    makes a program run another (GIT_EXTERNAL_DIFF, LD_PRELOAD, PAGER...)."""
    name = arg.split("=", 1)[0]
    if RUNS_ANOTHER_RE.match(name):
        raise denied(mode, f"setting {name}", "it makes a program run another one")
    if strict:
        raise denied(mode, f"env {name}=...", "environment assignments are refused")


def first_word(args: list[str]) -> str:
    """The first argument that is not an option."""
    return next((a for a in args if not a.startswith("-")), "")


def find_exec_commands(argv: list[str]) -> list[list[str]]:
    """The commands `find -exec CMD ... ;` would run."""
    commands, i = [], 1
    while i < len(argv):
        if argv[i] in FIND_EXEC:
            end = next((j for j in range(i + 1, len(argv)) if argv[j] in (";", "+")), len(argv))
            if end > i + 1:
                commands.append(argv[i + 1 : end])
            i = end
        i += 1
    return commands


def git_subcommand_at(argv: list[str]) -> int:
    """Where git's subcommand is in argv (len(argv) when there is none)."""
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        opt = argv[i].split("=", 1)[0]
        i += 2 if (opt in GIT_VALUE_OPTS or opt == "-c") and "=" not in argv[i] else 1
    return min(i, len(argv))


def git_subcommand(argv: list[str]) -> str:
    i = git_subcommand_at(argv)
    return argv[i] if i < len(argv) else ""


def script_commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script, split on operators, subshells and backticks."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if set(token) <= _SHELL_PUNCT:
            commands.append([])
            continue
        pieces = token.replace("$(", "`").split("`")
        for n, piece in enumerate(pieces):
            if n:
                commands.append([])
            if piece:
                commands[-1].append(piece)
    return [c for c in (_strip_prefix(c) for c in commands) if c]


def _strip_prefix(words: list[str]) -> list[str]:
    """Drop shell keywords and VAR=value assignments in front of a command; an assignment
    of a variable that runs programs (also after `export`) is refused."""
    for word in words:
        match = _ASSIGNMENT_RE.match(word)
        if match and RUNS_ANOTHER_RE.match(match.group(1)):
            raise PermissionDeniedError(
                f"setting {match.group(1)} is not allowed: it makes a program run another one"
            )
    i = 0
    while i < len(words) and (words[i] in _SHELL_KEYWORDS or _ASSIGNMENT_RE.match(words[i])):
        i += 1
    return words[i:]


def shell_script(argv: list[str]) -> str | None:
    """The SCRIPT of `sh -c SCRIPT` (also `bash -ec SCRIPT`), or None for a script file."""
    for i, arg in enumerate(argv[1:], start=1):
        if not arg.startswith("-") or arg.startswith("--"):
            if not arg.startswith("--"):
                return None  # the first operand is a script file
            continue
        if "c" in arg[1:]:
            return argv[i + 1] if i + 1 < len(argv) else ""
    return None
