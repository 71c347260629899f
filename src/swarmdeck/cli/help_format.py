"""Help that reads like a well-kept CLI's (git, uv, gh): plain text filled to the terminal,
a flag shown without a value, a value shown as `<NAME>`, arguments as `NAME` or `[NAME]`."""

from __future__ import annotations

import inspect
from typing import Any

from typer._click import Context, HelpFormatter
from typer._click.formatting import join_options
from typer.core import TyperCommand, TyperGroup

# What a value of each type is called in help, as click names them (shorter).
TYPE_NAMES = {"str": "TEXT", "Path": "PATH", "int": "N", "float": "NUMBER"}


def value_name(param: Any) -> str:
    """What an option's value or an argument is called in help: its metavar, the name of
    an argument, else its type's name."""
    if param.metavar:
        return param.metavar.strip("[]{}<>").upper()
    if param.param_type_name == "argument" or param.type_descriptor.is_choice:
        return (param.name or "value").upper()
    bare = param.bare_type()
    inner = bare[len("list[") : -1] if bare.startswith("list[") else bare
    return TYPE_NAMES.get(inner, (param.name or "value").upper())


def argument_usage(param: Any) -> str:
    """An argument as the usage line shows it: NAME when required, else [NAME]."""
    name = value_name(param)
    if param.nargs != 1:
        name += "..."
    return name if param.required else f"[{name}]"


def _option_label(param: Any) -> str:
    labels = [join_options(param.opts)[0]]
    if param.secondary_opts:
        labels.append(join_options(param.secondary_opts)[0])
    label = " / ".join(labels)
    # A flag takes no value, so it shows none (typer shows `<bool>`, which reads as one).
    if param.is_flag or param.count:
        return label
    return f"{label} <{value_name(param)}>"


def first_paragraph(text: str) -> str:
    """A help's first paragraph on one line: what a list of commands shows of it."""
    return " ".join(inspect.cleandoc(text or "").partition("\f")[0].split("\n\n")[0].split())


class HelpCommand(TyperCommand):
    """A command whose help is plain text with tidy usage and option labels."""

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                pieces.append(argument_usage(param))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                sections["Arguments"].append((argument_usage(param), record[1]))
            else:
                sections["Options"].append((_option_label(param), record[1]))
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class HelpGroup(TyperGroup):
    """A group whose help lists each command with its whole first paragraph, filled."""

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        HelpCommand.format_options(self, ctx, formatter)  # type: ignore[arg-type]
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.short_help or first_paragraph(command.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def use_plain_help(group: Any) -> None:
    """Give every command and group of a typer app (registered so far) the plain help."""
    for command in group.registered_commands:
        if command.cls in (None, TyperCommand):
            command.cls = HelpCommand
    for sub in group.registered_groups:
        sub.cls = HelpGroup
        if sub.typer_instance is not None:
            use_plain_help(sub.typer_instance)
