"""The TUI's modal screens: a line of text to send, a yes/no before cancelling, and an
artifact reader."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static

from swarmdeck.views.detail import ArtifactView

DIALOG_CSS = """
ModalScreen { align: center middle; }
#dialog { width: 80%; max-width: 110; height: auto; max-height: 90%;
          border: thick $accent; background: $panel; padding: 1 2; }
#dialog Label { width: 100%; }
#dialog .hint { color: $text-muted; }
#reader { height: 1fr; min-height: 10; }
"""


class PromptDialog(ModalScreen[str | None]):
    """Asks for one line of text: enter sends it, escape gives up."""

    DEFAULT_CSS = DIALOG_CSS
    BINDINGS = [Binding("escape", "dismiss_none", "back")]

    def __init__(self, title: str, hint: str) -> None:
        super().__init__()
        self.title_text, self.hint = title, hint

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(self.title_text, style="bold"))
            yield Input(placeholder="type here, enter sends", id="prompt")
            yield Label(self.hint, classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: hand the text back (an empty line sends nothing)."""
        self.dismiss(event.value if event.value.strip() else None)

    def action_dismiss_none(self) -> None:
        """Escape: nothing is sent."""
        self.dismiss(None)


class ConfirmDialog(ModalScreen[bool]):
    """A yes/no question: y confirms, n or escape does not."""

    DEFAULT_CSS = DIALOG_CSS
    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, message: Text) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.message)
            yield Label("y: yes, cancel them · n or escape: no", classes="hint")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)


class ArtifactDialog(ModalScreen[None]):
    """A session's artifacts: pick one to read the whole of it."""

    DEFAULT_CSS = DIALOG_CSS
    BINDINGS = [Binding("escape,q", "dismiss", "back")]

    def __init__(self, artifacts: list[ArtifactView]) -> None:
        super().__init__()
        self.artifacts = artifacts

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text("artifacts: enter reads one, escape goes back", style="bold"))
            yield OptionList(
                *(f"{a.name}  ({a.size:,} bytes)  {a.link}" for a in self.artifacts),
                id="choices",
            )
            with VerticalScroll(id="reader"):
                yield Static(self._text(0), id="text")

    def _text(self, index: int) -> Text:
        if not self.artifacts:
            return Text("no artifacts")
        art = self.artifacts[index]
        return Text(f"{art.path}\n\n", style="dim") + Text(art.read(limit=None))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        """Show the highlighted artifact."""
        self.query_one("#text", Static).update(self._text(event.option_index))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter: read it (focus the text to scroll it)."""
        self.query_one("#text", Static).update(self._text(event.option_index))
        self.query_one("#reader").focus()
