"""Details on Enter: a queue's head messages and dead letters; a session's full query and locks.
Fetched by a thread worker on a probe session, then shown. Every value, column name and title is
the database's text (a library's payloads, another session's query): each is an inert `Text`,
never a `str` (a Rich table reads a str cell as markup)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from probes.model import BlockedSession, QueueSample
from probes.sources import QueueDetails

from .. import format as fmt


class DetailsScreen(ModalScreen[None]):
    """What Enter shows, in a box that says how to close it (on its border, as the help does)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,enter", "close", "Close", id="details.close"),
        Binding("j", "scroll_box(1)", "Scroll down", show=False),
        Binding("k", "scroll_box(-1)", "Scroll up", show=False),
        # A queue's details: to what holds it up (the dashboard's `v`, remapped by the same id).
        Binding("v", "goto", "Go to what holds the queue up", id="verdict.goto", show=False),
        # A library's queue: its jobs, by state, to search and act on (tui/screens/jobs.py).
        Binding("J", "jobs", "The queue's jobs", id="details.jobs", show=False),
    ]
    CLOSE_HINT = "↑↓ j k PgUp PgDn scroll · Esc, q or Enter closes"
    DEFAULT_CSS = """
    DetailsScreen { align: center middle; }
    DetailsScreen > VerticalScroll { width: 95%; height: 90%; border: round $accent; background: $surface; padding: 0 1; }
    """

    def __init__(self, title: str, loader, *, goto: Callable[[], None] | None = None,
                 jobs: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._jobs = jobs  # a queue's: open its Jobs screen (None: its source has no job console)
        if jobs is not None:
            self.CLOSE_HINT = f"J jobs · {self.CLOSE_HINT}"
        self.title_text = title
        self.loader = loader  # runs in a thread, returns a list of renderables
        self.renderables: list | None = None  # what is shown, once loaded
        self._goto = goto  # a queue's: go to what its verdict names (closing this box when it goes)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "goto":
            return self._goto is not None
        if action == "jobs":
            return self._jobs is not None
        return True

    def action_goto(self) -> None:
        if self._goto is not None:
            self._goto()

    def action_jobs(self) -> None:
        if self._jobs is not None:
            self._jobs()

    def compose(self) -> ComposeResult:
        box = VerticalScroll()
        box.border_subtitle = self.CLOSE_HINT
        with box:
            yield Label(fmt.plain(self.title_text, style="bold"))
            yield Static("loading…", id="details-body")

    def on_mount(self) -> None:
        self.run_worker(self._load, thread=True, exclusive=True)

    def _load(self) -> None:
        try:
            renderables = self.loader()
        except Exception as exc:
            renderables = [Text(f"could not load: {fmt.one_line(str(exc), 200)}", style="red")]
        self.app.call_from_thread(self._show, renderables)

    def _show(self, renderables) -> None:
        from rich.console import Group

        self.renderables = renderables
        self.query_one("#details-body", Static).update(Group(*renderables))

    def action_close(self) -> None:
        self.dismiss(None)

    def action_scroll_box(self, lines: int) -> None:
        """j and k scroll, as ↓ and ↑."""
        self.query_one(VerticalScroll).scroll_relative(y=lines, animate=False)


def verdict_renderable(queue: QueueSample, hint: str | None = None) -> Text:
    """The verdict at the top of a queue's details: its code, its reason, how long it has held,
    who is involved (`hint`: where the verdict's key goes, e.g. `v: go to the root blocker`), and
    the consumers working on the queue's table now."""
    d = queue.diagnosis
    out = Text()
    if d is None:
        return out
    out.append(f"{fmt.verdict_word(d.code)}", style=fmt.VERDICT_STYLES.get(d.code, "bold"))
    if d.since_s is not None:
        out.append(f"  for {fmt.seconds(d.since_s)}", style="dim")
    out.append(f"\n{fmt.one_line(d.reason, 400)}")
    if d.pids:
        out.append(f"\nsessions: {', '.join(map(str, d.pids))}", style="dim")
    if d.objects:
        out.append(f"\nobjects: {fmt.one_line(', '.join(d.objects), 300)}", style="dim")
    if hint:
        out.append(f"\n{fmt.one_line(hint, 200)}", style="bold")
    if queue.consumers is None:
        out.append("\nconsumers: not looked for", style="dim")
    elif not queue.consumers:
        out.append("\nconsumers: none on its table now", style="yellow")
    else:
        out.append(f"\nconsumers ({len(queue.consumers)}):")
        for c in queue.consumers[:20]:
            how = f"{c.state or '?'} {fmt.seconds(c.for_s)}" if c.for_s is not None else c.state or "?"
            wait = ", waiting for a lock" if c.waiting else ""
            out.append(f"\n  {c.pid}  {fmt.one_line(c.application or '-', 40)}  {how}{wait}  (by {c.evidence})",
                       style="yellow" if c.waiting else "")
        if len(queue.consumers) > 20:
            out.append(f"\n  … {len(queue.consumers) - 20:,} more", style="dim")
    return out


def queue_renderables(details: QueueDetails) -> list:
    if details.head and "state" in details.head[0] and "body" in details.head[0]:  # the engine's queue
        head = Table(title="Head messages (oldest first)", expand=True)
        for column in ("id", "state", "attempts", "enqueued", "body", "last error"):
            head.add_column(column, overflow="fold", no_wrap=column == "enqueued")  # wrapped, never cut
        for r in details.head:
            head.add_row(fmt.plain(r["id"]), fmt.plain(r["state"]), fmt.plain(r["attempts"]), Text(f"{r['enqueued_at']:%H:%M:%S}"),
                         Text(fmt.one_line(r["body"], 60)), Text(fmt.one_line(r["last_error"], 60)))
        dead = Table(title="Dead letters (newest first)", expand=True)
        for column in ("message", "attempts", "died", "error", "body"):
            dead.add_column(column, overflow="fold", no_wrap=column == "died")
        for r in details.dead:
            dead.add_row(fmt.plain(r["message_id"]), fmt.plain(r["attempts"]), Text(f"{r['died_at']:%H:%M:%S}"),
                         Text(fmt.one_line(r["last_error"], 80), style="red"), Text(fmt.one_line(r["body"], 40)))
        return [head, dead]
    out: list = [_rows_table("Head (oldest first)", details.head)]
    if details.blocked:
        out.append(_rows_table("Blocked: due, but skipped by the library's fetch (and what holds each back)",
                               details.blocked, style="yellow"))
    if details.dead:
        out.append(_rows_table("Failed for good (newest first)", details.dead, style="red"))
    return out


# More columns than this and a library's rows are shown one record at a time (name: value lines),
# so that no value (a timestamp, an id) is cut to fit a column a few cells wide.
MAX_TABLE_COLUMNS = 6


def _rows_table(title: str, rows: list[dict], style: str = "") -> Table:
    """Rows of any table, with their own columns: every value whole (long ones wrapped)."""
    columns = list(rows[0].keys()) if rows else ["(none)"]
    if len(columns) > MAX_TABLE_COLUMNS:
        records = Table(title=title, expand=True, show_header=False, show_lines=True)
        records.add_column("record", overflow="fold")
        for r in rows:
            record = Table.grid(padding=(0, 2))
            record.add_column("field", style="bold", no_wrap=True)
            record.add_column("value", overflow="fold")
            for c in columns:
                record.add_row(fmt.plain(c.replace("_", " ")), Text(_value(r[c]), style=style))
            records.add_row(record)
        return records
    table = Table(title=title, expand=True)
    for column in columns:
        table.add_column(fmt.plain(column.replace("_", " ")), overflow="fold")
    for r in rows:
        table.add_row(*[Text(_value(r[c]), style=style) for c in columns])
    return table


def _value(value: object) -> str:
    """A value on one line, inert, long text cut at 300 characters (said by the ellipsis), figures
    and timestamps whole."""
    return "-" if value is None else fmt.one_line(str(value), 300)


def session_renderables(details: dict, *, blocked_by: tuple[int, ...] = (), blocks: list[int] | tuple[int, ...] = (),
                        waiting: BlockedSession | None = None, here: str | None = None) -> list:
    """A session's facts, its whole query, who blocks it and whom it blocks (from the last
    sample), what it waits for (the lock tree's words, the server's lock type and mode, its
    parallel workers waiting with it), and its locks."""
    s = details["session"]
    if s is None:
        return [Text("the session has ended", style="yellow")]
    info = Table.grid(padding=(0, 2))
    info.add_column("field", style="bold", no_wrap=True)
    info.add_column("value", overflow="fold")
    for key in ("pid", "usename", "application_name", "client_addr", "state", "wait_event_type", "wait_event"):
        info.add_row(key, fmt.plain(s[key]) if s[key] is not None else "-")
    for key in ("session_age_s", "xact_age_s", "query_age_s"):
        info.add_row(key.replace("_s", ""), fmt.seconds(s[key]))
    locks = Table(title="Locks", expand=True)
    for column in ("type", "mode", "granted", "relation / object"):
        locks.add_column(column, overflow="fold")
    for lock in details["locks"]:
        what = lock["relation"] or lock["transactionid"] or (f"{lock['classid']}/{lock['objid']}" if lock["objid"] else "-")
        granted = Text("yes", style="green") if lock["granted"] else Text("WAITING", style="bold red")
        locks.add_row(fmt.plain(lock["locktype"]), fmt.plain(lock["mode"]), granted, fmt.plain(what))
    waits = Text("\nBlocked by: ", style="bold")
    waits.append(", ".join("a prepared transaction" if p == 0 else f"pid {p}" for p in blocked_by) or "nobody",
                 style="yellow" if blocked_by else "")
    held = Text("Blocks: ", style="bold")
    held.append(", ".join(f"pid {p}" for p in blocks) or "nobody", style="bold red" if blocks else "")
    wanted = []
    if waiting is not None:
        lock = fmt.inert(f"{waiting.lock_type or '?'} {waiting.mode or '?'}")
        wanted.append(Text.assemble(("Waits: ", "bold"), (fmt.wait_phrase(waiting, here), "magenta"),
                                    (f" (the server's lock: {lock})", "dim")))
        if waiting.holders_note:
            wanted.append(Text(fmt.one_line(waiting.holders_note, 300), style="yellow"))
        if waiting.worker_pids:
            wanted.append(Text.assemble(("Parallel workers waiting with it: ", "bold"),
                                        f"{len(waiting.worker_pids)} (pids {', '.join(map(str, waiting.worker_pids))})"))
    return [info, Text("\nQuery:", style="bold"), Text(fmt.inert_lines(s["query"])), waits, *wanted, held, locks]
