"""Small modal screens: help, the notices log, yes/no confirmation, a one-line prompt. What they
quote (a notice, a question naming a session or a queue, a host's error) is given to them as a
str and shown as an inert `Text`, never as markup."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from dbcore.text import inert


class ScrollingBoxScreen(ModalScreen[None]):
    """A box as tall as the screen that scrolls (↑ ↓ j k PgUp PgDn Home End) at any terminal size,
    its title on the border and how to close it beneath: the help and the notices log."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "scroll_box(1)", "Scroll down", show=False),
        Binding("k", "scroll_box(-1)", "Scroll up", show=False),
    ]

    DEFAULT_CSS = """
    ScrollingBoxScreen { align: center middle; }
    ScrollingBoxScreen > VerticalScroll { width: 100%; height: 100%; border: round $accent; background: $surface;
                                          padding: 0 1; }
    """

    def scrolling_box(self, box_id: str, title: str, closed_by: str) -> VerticalScroll:
        box = VerticalScroll(id=box_id)
        box.border_title = title
        box.border_subtitle = f"↑↓ j k PgUp PgDn scroll · {closed_by} closes"
        return box

    def action_scroll_box(self, lines: int) -> None:
        """j and k scroll, as ↓ and ↑ (a modal screen's keys are its own: the dashboard's j and k
        do not reach it)."""
        box = self.query_one(VerticalScroll)
        box.scroll_relative(y=lines, animate=False)


class HelpScreen(ScrollingBoxScreen):
    """The keys that apply now (the dashboard chooses them: keymap.help_keys), with their binding ids."""

    AUTO_FOCUS = "#help-keys"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "dismiss", "Close", id="help.close")]
    DEFAULT_CSS = """
    HelpScreen > VerticalScroll { max-width: 100; }
    """

    def __init__(self, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self._keys = bindings

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=True, expand=True)
        table.add_column("Key", style="bold cyan", no_wrap=True)
        table.add_column("Action")
        table.add_column("Binding id", style="dim")
        for key, description, binding_id in self._keys:  # a key from the config's [keys] may be "["
            table.add_row(Text(inert(key)), Text(inert(description)), Text(inert(binding_id)))
        with self.scrolling_box("help-keys", "queuetop keys", "Esc, q or ?"):
            yield Static("The keys that apply here and now (the footer shows the focused panel's). "
                         "Remap a key by its id in the config's \\[keys] table.")
            yield Static("Figures: ~ an estimate (a table read in turns); count… not known yet, being counted "
                         "(a table larger than the first reading, whose sample cannot bound it within 5 %).")
            yield Static(table)


class NoticesScreen(ScrollingBoxScreen):
    """Every notice of this session (engine actions, scenario summaries, errors), oldest first,
    scrolled to the newest."""

    AUTO_FOCUS = "#notices-log"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,m", "dismiss", "Close", id="notices.close")]
    DEFAULT_CSS = """
    NoticesScreen > VerticalScroll { max-width: 120; }
    """

    def __init__(self, notices: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self._notices = notices  # (HH:MM:SS, severity, text)

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, expand=True)
        table.add_column("At", style="dim", no_wrap=True)
        table.add_column("Notice", overflow="fold")  # wrapped, never cut
        for at, severity, text in self._notices:
            table.add_row(at, Text(inert(text), style=SEVERITY_STYLE.get(severity, "")))
        with self.scrolling_box("notices-log", f"notices ({len(self._notices)})", "Esc, q or m"):
            yield Static(table if self._notices else Text("nothing yet: engine actions and scenario summaries are logged here"))

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).scroll_end(animate=False)


SEVERITY_STYLE = {"warning": "yellow", "error": "bold red"}


class HostsScreen(ScrollingBoxScreen):
    """One line per host: its state, worst queue, blocked sessions, sessions, when it was sampled.
    A number is whole or absent: the text columns fold, the figures keep their width."""

    AUTO_FOCUS = "#hosts-list"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,H", "dismiss", "Close", id="hosts.close")]
    DEFAULT_CSS = """
    HostsScreen > VerticalScroll { max-width: 140; }
    """

    def __init__(self, rows: list[tuple[str, ...]], current: int) -> None:
        super().__init__()
        # (number, name, state, worst queue, oldest, blocked, roots, sessions, sampled, why), inert:
        # a host's error and its worst queue's name are the database's text.
        self._rows = [tuple(inert(cell) for cell in row) for row in rows]
        self._current = current

    def compose(self) -> ComposeResult:
        table = Table(box=None, expand=True, header_style="bold")
        figures = {"#", "Oldest", "Blocked", "Roots", "Sessions", "Sampled"}
        for column in ("#", "Host", "State", "Worst queue", "Oldest", "Blocked", "Roots", "Sessions", "Sampled"):
            width = max([len(column), *(cell_len(row[len(table.columns)]) for row in self._rows)])
            if column in figures:
                table.add_column(column, no_wrap=True, min_width=width, justify="right" if column != "#" else "left")
            else:
                table.add_column(column, overflow="fold")
        for index, row in enumerate(self._rows):
            style = "reverse" if index == self._current else ""
            table.add_row(*[Text(cell, style=("bold white on red" if cell in ("DOWN", "STOPPED") else "")) for cell in row[:-1]],
                          style=style)
        # Why a host is down, or what its probes could not see: below, each on lines of its own.
        notes = [Text.assemble((f"{row[0]} {row[1]}: ", "bold"), (row[-1], "red" if row[2] in ("DOWN", "STOPPED") else "yellow"))
                 for row in self._rows if row[-1]]
        with self.scrolling_box("hosts-list", f"hosts ({len(self._rows)})", "Esc, q or H"):
            yield Static(table)
            for note in notes:
                yield Static(note)


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 70; max-width: 100%; height: auto; border: thick $error; background: $surface;
                               padding: 1 2; }
    ConfirmScreen Label { width: 100%; }
    ConfirmScreen #confirm-items { height: auto; max-height: 12; margin: 1 0; }
    """

    def __init__(self, question: str, items: list[str] | None = None) -> None:
        """`items`: what the question acts on, a line each (the tagged sessions, the tagged jobs),
        listed under it and scrolled where they are more than the box shows."""
        super().__init__()
        self.question = question
        self.items = items or []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(inert(self.question)))
            if self.items:
                with VerticalScroll(id="confirm-items"):
                    yield Static(Text("\n".join(inert(item) for item in self.items), no_wrap=True, overflow="ellipsis"))
            yield Label("[b]y[/b] yes    [b]n[/b] / Esc no")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class PromptScreen(ModalScreen[str | None]):
    """One line of input: Enter submits, Esc cancels."""

    AUTO_FOCUS = "#prompt-input"

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]
    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical { width: 80%; max-width: 90; height: auto; border: round $accent; background: $surface; padding: 0 1; }
    PromptScreen Label { width: 100%; }  /* wrapped to the box, never cut */
    """

    def __init__(self, title: str, placeholder: str, value: str = "") -> None:
        super().__init__()
        self.title_text, self.placeholder, self.value = title, placeholder, value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(inert(self.title_text)))
            yield Input(value=inert(self.value), placeholder=inert(self.placeholder), id="prompt-input")
            yield Label(Text(f"{inert(self.placeholder)} — Enter to run, Esc to cancel", style="dim"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
