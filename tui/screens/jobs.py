"""The Jobs screen (a queue's details, then `J`): any library's jobs by state, a page at a time
(keyset: as fast deep in a million jobs as on the first page), searched by id, kind or arguments,
and acted on with the library's own semantics (jobs/): the job under the cursor (r retry, g run
now, c cancel, d delete) or every job the filter matches (R, G, C, D: the count in the
confirmation, done in short batches with progress, x stops); P pauses the queue, U resumes it. The job acted on is the one under the
cursor when the key is pressed (its id and the state it was listed in, compare-and-set), whatever
the list shows by the time the confirmation is answered. Space tags the job under the cursor (its
id and the state it was listed in): with jobs tagged, r g c d act on the tagged ones (one
confirmation lists them; each compare-and-set on its listed state), then the tags clear; T untags.
Under --read-only the keys that write are not offered. Every value is the database's text: inert."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from jobs.model import Job, JobFilter, Outcome, Page

from .. import format as fmt
from .details import DetailsScreen
from .dialogs import ConfirmScreen, PromptScreen

# The states `s` cycles through (None: every state).
STATE_CYCLE: tuple[str | None, ...] = ("dead", "ready", "delayed", "blocked", "in_flight", "done", None)
PAGE = 100
ACTION_KEYS = {"retry": "r", "run-now": "g", "cancel": "c", "delete": "d"}
WORDS = {"retry": "Retry", "run-now": "Run now", "cancel": "Cancel", "delete": "Delete"}


def parse_search(text: str) -> tuple[JobFilter | None, str | None]:
    """What `/` typed: `{...}` or `[...]` (arguments that contain this JSON), `kind:NAME`, `#ID`
    (one job: the second value), else text the arguments hold. The filter's state is set later."""
    text = text.strip()
    if not text:
        return JobFilter(), None
    if text.startswith("#"):
        return None, text[1:].strip()
    if text.startswith("kind:"):
        return JobFilter(kind=text[5:].strip() or None), None
    if text[:1] in "{[":
        return JobFilter(match=json.loads(text)), None
    return JobFilter(text=text), None


class JobsScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Back", id="jobs.close"),
        Binding("s", "state", "State", id="jobs.state"),
        Binding("o", "order", "Oldest/newest", id="jobs.order"),
        Binding("slash", "search", "Search", id="jobs.search", key_display="/"),
        Binding("n", "page(1)", "Next page", id="jobs.next"),
        Binding("p", "page(-1)", "Previous page", id="jobs.previous"),
        Binding("enter", "show", "Job", id="jobs.show", show=False),
        Binding("r", "act('retry', False)", "Retry", id="jobs.retry"),
        Binding("g", "act('run-now', False)", "Run now", id="jobs.run-now"),
        Binding("c", "act('cancel', False)", "Cancel", id="jobs.cancel"),
        Binding("d", "act('delete', False)", "Delete", id="jobs.delete"),
        Binding("R", "act('retry', True)", "Retry all", id="jobs.retry-all", show=False),
        Binding("G", "act('run-now', True)", "Run all now", id="jobs.run-now-all", show=False),
        Binding("C", "act('cancel', True)", "Cancel all", id="jobs.cancel-all", show=False),
        Binding("D", "act('delete', True)", "Delete all", id="jobs.delete-all", show=False),
        Binding("x", "stop", "Stop", id="jobs.stop", show=False),
        Binding("space", "tag", "Tag", id="jobs.tag", key_display="Space"),
        Binding("T", "untag", "Untag all", id="jobs.untag", show=False),
        Binding("P", "pause(True)", "Pause the queue", id="jobs.pause", show=False),
        Binding("U", "pause(False)", "Resume the queue", id="jobs.resume", show=False),
        # The job under the cursor as JSON, the page listed as CSV (tui/dashboard/export.py); not in
        # the footer, which has no room left at 80 columns: docs/dashboard.md lists them.
        Binding("y", "copy", "Copy", id="jobs.copy", show=False),
        Binding("e", "export", "Export", id="jobs.export", show=False),
    ]
    DEFAULT_CSS = """
    JobsScreen #jobs-title { height: auto; padding: 0 1; background: $boost; }
    JobsScreen #jobs-status { height: auto; padding: 0 1; }
    JobsScreen DataTable { height: 1fr; }
    """

    def __init__(self, backend: Any, queue: Any, *, counts: Callable[[], dict[str, int | None]] | None = None,
                 read_only: bool = False, start_state: str | None = "dead") -> None:
        """`backend`: the host's DatabaseBackend (its job methods run in threads); `queue`: the
        jobs.resolve.JobQueue; `counts()`: the queue's figures by state from the latest sample."""
        super().__init__()
        self.backend = backend
        self.queue = queue
        self.library = type(queue.library)
        self._counts = counts
        self.read_only = read_only
        self.state: str | None = start_state
        self.newest = False
        self.search = JobFilter()
        self.pages: list[str | None] = [None]  # the keyset position of each page shown so far
        self.page_now: Page | None = None
        self.stopping: threading.Event | None = None  # a bulk action running: set to stop it
        # The jobs tagged (Space), by id, as listed when tagged (their state: what r g c d expect).
        self.tags: dict[str, Job] = {}

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="jobs-title")
        table: DataTable[Text] = DataTable(id="jobs-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(id="jobs-status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for column in ("id", "state", "kind", "tries", "age", "runs at", "last error"):
            table.add_column(column, key=column)
        self._title()
        self.load()

    @property
    def filter(self) -> JobFilter:
        return JobFilter(state=self.state, kind=self.search.kind, match=self.search.match, text=self.search.text)

    def _title(self) -> None:
        counts = self._counts() if self._counts is not None else {}
        shown = []
        for state in (s for s in STATE_CYCLE if s is not None):
            figure = counts.get(state)
            label = state.replace("_", " ")
            text = f"{label} {figure:,}" if figure is not None else label
            shown.append(f"[{text}]" if state == self.state else text)
        title = Text.assemble((f"Jobs of {self.queue.source} queue ", "bold"), (fmt.one_line(self.queue.shown, 60), "bold"),
                              "\n", " · ".join(shown) + ("  [all states]" if self.state is None else ""),
                              ("\n" + ("newest first" if self.newest else "oldest first") + f" · page {len(self.pages)}", "dim"))
        if self.search != JobFilter():
            title.append(f" · search: {fmt.one_line(self.search.describe(), 80)}", style="yellow")
        if self.tags:
            title.append(f" · {len(self.tags)} tagged (r g c d act on them; T untags)", style="bold")
        if self.read_only:
            title.append(" · read-only: no action offered", style="dim")
        self.query_one("#jobs-title", Static).update(title)

    def status(self, text: str | Text, style: str = "") -> None:
        self.query_one("#jobs-status", Static).update(text if isinstance(text, Text) else Text(text, style=style))

    # -- reading -----------------------------------------------------------------------------

    def load(self) -> None:
        """The page at the current keyset position, fetched in a thread."""
        after = self.pages[-1]
        flt, newest = self.filter, self.newest
        self.status("loading…", "dim")

        def fetch() -> None:
            try:
                page = self.backend.jobs_page(self.queue, flt, after=after, limit=PAGE, newest_first=newest)
            except Exception as exc:
                self.app.call_from_thread(self.status, f"could not list the jobs: {fmt.one_line(str(exc), 300)}", "red")
                return
            self.app.call_from_thread(self._show, page)

        self.run_worker(fetch, thread=True, exclusive=True, group="jobs-load")

    def _show(self, page: Page) -> None:
        self.page_now = page
        table = self.query_one(DataTable)
        table.clear()
        for job in page.jobs:
            table.add_row(self._id_cell(job.id), Text(job.state.replace("_", " "), style=_state_style(job.state)),
                          Text(fmt.one_line(job.kind or "-", 30)), Text(str(job.attempts) if job.attempts is not None else "-"),
                          Text(fmt.seconds(job.age_s) if job.age_s is not None else "-"),
                          Text(f"{job.scheduled_at:%m-%d %H:%M:%S}" if job.scheduled_at is not None else "-"),
                          Text(fmt.one_line(job.last_error or "", 60), style="red"), key=job.id)
        self._title()
        said = [f"{len(page.jobs)} job(s) on this page"]
        if page.after is not None:
            said.append("n: next page")
        if len(self.pages) > 1:
            said.append("p: previous")
        line = Text(" · ".join(said), style="dim")
        if page.note:
            line.append(f"\n{fmt.one_line(page.note, 300)}", style="yellow")
        self.status(line)

    def selected(self) -> Job | None:
        page = self.page_now
        table = self.query_one(DataTable)
        if page is None or not page.jobs or table.cursor_row is None or not 0 <= table.cursor_row < len(page.jobs):
            return None
        return page.jobs[table.cursor_row]

    # -- keys ----------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("act", "pause"):
            return not self.read_only
        if action == "stop":
            return self.stopping is not None
        return True

    def action_copy(self) -> None:
        """y: the job under the cursor, as `queuetop jobs show --json` prints it, to the clipboard."""
        from ..dashboard.export import copy_job

        said, severity = copy_job(self.app, self.queue, self.selected())
        self.app.notify(said, severity=severity, timeout=6)

    def action_export(self) -> None:
        """e: the jobs listed (this page) as CSV, the file named in a notice."""
        from ..dashboard.export import jobs_rows, write_export

        jobs = self.page_now.jobs if self.page_now is not None else []
        header, rows = jobs_rows(jobs)
        said, severity = write_export("jobs", header, rows)
        self.app.notify(said, severity=severity, timeout=10)

    def action_close(self) -> None:
        if self.stopping is not None:
            self.app.notify("a bulk action is running: x stops it after the batch in hand", severity="warning")
            return
        self.dismiss(None)

    def action_state(self) -> None:
        index = STATE_CYCLE.index(self.state) if self.state in STATE_CYCLE else -1
        self.state = STATE_CYCLE[(index + 1) % len(STATE_CYCLE)]
        self.pages = [None]
        self.load()

    def action_order(self) -> None:
        self.newest = not self.newest
        self.pages = [None]
        self.load()

    def action_page(self, step: int) -> None:
        if step > 0:
            if self.page_now is None or self.page_now.after is None:
                self.app.notify("this is the last page", timeout=3)
                return
            self.pages.append(self.page_now.after)
        else:
            if len(self.pages) == 1:
                self.app.notify("this is the first page", timeout=3)
                return
            self.pages.pop()
        self.load()

    def action_search(self) -> None:
        def submitted(text: str | None) -> None:
            if text is None:
                return
            try:
                flt, job_id = parse_search(text)
            except json.JSONDecodeError as exc:
                self.app.notify(f"not JSON: {exc.msg}", severity="error")
                return
            if job_id is not None:
                self.show_job(job_id)
                return
            assert flt is not None
            self.search = flt
            self.pages = [None]
            self.load()

        self.app.push_screen(PromptScreen("Search: {json} arguments contain it · kind:NAME · #ID one job · text in the arguments "
                                          "(empty: clear)", "SEARCH", ""), submitted)

    def action_show(self) -> None:
        job = self.selected()
        if job is not None:
            self.show_job(job.id)

    def show_job(self, job_id: str) -> None:
        from ..jobtext import job_lines

        def loader() -> list:
            job = self.backend.job(self.queue, job_id)
            if job is None:
                return [Text(f"no job {job_id} in this queue (it may have finished and been removed)", style="yellow")]
            return [Text("\n".join(job_lines(job)))]

        self.app.push_screen(DetailsScreen(f"Job {job_id} of {self.queue.shown}", loader))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_show()

    # -- actions -----------------------------------------------------------------------------------

    # -- tags (Space) -------------------------------------------------------------------------------

    def _id_cell(self, job_id: str) -> Text:
        """A job's id, marked `*` when tagged (a mark, not a colour alone: NO_COLOR)."""
        return Text(f"*{job_id}", style="bold reverse") if job_id in self.tags else Text(job_id)

    def action_tag(self) -> None:
        job = self.selected()
        if job is None:
            self.app.notify("no job selected", severity="warning")
            return
        if self.tags.pop(job.id, None) is None:
            self.tags[job.id] = job
        try:
            # Wider by its mark: the column too (DataTable keeps a column's width unless told), so
            # the id stays whole.
            self.query_one(DataTable).update_cell(job.id, "id", self._id_cell(job.id), update_width=True)
        except Exception:  # the row went with a reload meanwhile: the next page draws the mark
            pass
        self._title()

    def action_untag(self) -> None:
        count = len(self.tags)
        self.tags.clear()
        self._show_marks()
        self.app.notify(f"{count} job(s) untagged" if count else "no job is tagged", timeout=3)

    def _show_marks(self) -> None:
        if self.page_now is not None:
            table = self.query_one(DataTable)
            for job in self.page_now.jobs:
                if job.id in table.rows:
                    table.update_cell(job.id, "id", self._id_cell(job.id))
        self._title()

    def _act_on_tagged(self, action: str, what: str) -> None:
        """r g c d with jobs tagged: each tagged job whose listed state the action applies to, after
        one confirmation that lists them; each changed only if it is still in that state."""
        states = self.library.states_for(action)
        jobs = sorted(self.tags.values(), key=lambda j: (len(j.id), j.id))
        chosen = [j for j in jobs if j.state in states]
        left = len(jobs) - len(chosen)
        if not chosen:
            self.app.notify(f"no tagged job is {' or '.join(s.replace('_', ' ') for s in states)}: {action} is for those "
                            f"({len(jobs)} tagged)", severity="warning", timeout=8)
            return
        question = (f"{WORDS[action]} these {len(chosen)} tagged job(s) of {self.queue.shown!r}? It runs: {what}. Each only if it "
                    "is still in the state it was listed in.")
        if left:
            question += f" {left} other tagged job(s) are in a state {action} is not for: left alone."
        items = [f"{j.id}  {j.state.replace('_', ' ')}  {fmt.one_line(j.kind or '-', 30)}  "
                 f"{fmt.seconds(j.age_s) if j.age_s is not None else '-'}  {fmt.one_line(j.last_error or '', 60)}" for j in chosen]

        def decided(yes: bool | None) -> None:
            if yes:
                self.tags.clear()
                self._show_marks()
                self.run_worker(lambda: self._act_tagged(action, chosen), thread=True, group="jobs-act")

        self.app.push_screen(ConfirmScreen(question, items), decided)

    def _act_tagged(self, action: str, jobs: list[Job]) -> None:
        """Compare-and-set per listed state: one call for the jobs listed in each state."""
        by_state: dict[str, list[str]] = {}
        for job in jobs:
            by_state.setdefault(job.state, []).append(job.id)
        changed, errors = 0, []
        for state, ids in by_state.items():
            try:
                changed += self.backend.jobs_act(self.queue, action, ids, expect=state).changed
            except Exception as exc:
                errors.append(fmt.one_line(str(exc), 200))
        message = f"{self.queue.shown}: {action} {changed} of {len(jobs)} tagged job(s)"
        if changed < len(jobs) and not errors:
            message += f": {len(jobs) - changed} had changed since listed (or a worker holds them)"
        if errors:
            message += f"; failed: {errors[0]}"
        severity = "error" if errors else "information" if changed == len(jobs) else "warning"
        self.app.call_from_thread(self.app.notify, message, severity=severity, timeout=10)
        self.app.call_from_thread(self.load)

    def action_act(self, action: str, everything: bool) -> None:
        if self.read_only or self.stopping is not None:
            return
        if action not in self.library.mirrors:
            why = self.library.lacks.get(action, "the library has no such action")
            self.app.notify(f"{self.queue.source} has no {action}: {why}", severity="warning", timeout=8)
            return
        what = self.library.mirrors[action]
        if not everything and self.tags:
            self._act_on_tagged(action, what)
            return
        if not everything:
            job = self.selected()  # the job under the cursor now: its id and state, whatever the list shows later
            if job is None:
                self.app.notify("no job selected", severity="warning")
                return
            if job.state not in self.library.states_for(action):
                self.app.notify(f"job {job.id} is {job.state.replace('_', ' ')}: {action} is for "
                                f"{', '.join(self.library.states_for(action))} jobs", severity="warning", timeout=6)
                return
            question = f"{WORDS[action]} job {job.id} ({job.state.replace('_', ' ')}) of {self.queue.shown!r}? It runs: {what}"

            def decided(yes: bool | None) -> None:
                if yes:
                    self.run_worker(lambda: self._act_one(action, job), thread=True, group="jobs-act")

            self.app.push_screen(ConfirmScreen(question), decided)
            return
        flt = self.filter
        if flt.state is None or flt.state not in self.library.states_for(action):
            self.app.notify(f"{action} on every job needs a state it applies to ({', '.join(self.library.states_for(action))}): "
                            "s picks the state", severity="warning", timeout=8)
            return
        self.status("counting the jobs the filter matches…", "dim")
        self.run_worker(lambda: self._count_then_ask(action, flt, what), thread=True, group="jobs-act")

    def _act_one(self, action: str, job: Job) -> None:
        try:
            outcome = self.backend.jobs_act(self.queue, action, [job.id], expect=job.state)
        except Exception as exc:
            self.app.call_from_thread(self.app.notify, f"{action} job {job.id}: {fmt.one_line(str(exc), 300)}", severity="error")
            return
        if outcome.changed:
            message, severity = f"{self.queue.shown}: job {job.id}: {action} done ({self.library.mirrors[action]})", "information"
        else:
            message, severity = (f"{self.queue.shown}: job {job.id} was not changed: it is no longer {job.state.replace('_', ' ')} "
                                 "(or a worker holds it)"), "warning"
        self.app.call_from_thread(self.app.notify, message, severity=severity)
        self.app.call_from_thread(self.load)

    def _count_then_ask(self, action: str, flt: JobFilter, what: str) -> None:
        try:
            count, more = self.backend.jobs_count(self.queue, flt)
        except Exception as exc:
            self.app.call_from_thread(self.status, f"could not count: {fmt.one_line(str(exc), 300)}", "red")
            return
        if count == 0:
            self.app.call_from_thread(self.status, f"no {flt.describe()} job to {action}", "yellow")
            return
        question = (f"{WORDS[action]} all {count:,}{'+' if more else ''} job(s) of {self.queue.shown!r} matching "
                    f"{flt.describe()}? It runs: {what}. In batches of a short transaction each; a job that changed since it was "
                    "listed is skipped and counted; x stops after the batch in hand.")

        def decided(yes: bool | None) -> None:
            if yes:
                self.stopping = threading.Event()
                self.refresh_bindings()
                stop = self.stopping
                self.run_worker(lambda: self._bulk(action, flt, stop), thread=True, group="jobs-bulk")
            else:
                self.status("not confirmed: nothing done", "dim")

        self.app.call_from_thread(self.app.push_screen, ConfirmScreen(question), decided)

    def _bulk(self, action: str, flt: JobFilter, stop: threading.Event) -> None:
        def progress(outcome: Outcome) -> None:
            self.app.call_from_thread(self.status, f"{action}: {outcome.matched:,} matched · {outcome.changed:,} changed · "
                                      f"{outcome.skipped:,} skipped · x stops", "bold")

        try:
            outcome = self.backend.jobs_bulk(self.queue, action, flt, stop=stop, progress=progress)
            message = (f"{self.queue.shown}: {action} {flt.describe()}: {outcome.matched:,} matched, {outcome.changed:,} changed, "
                       f"{outcome.skipped:,} skipped")
            if outcome.stopped_after is not None:
                message += f"; stopped after job {outcome.stopped_after} (the same keys go on from the start: done jobs no longer match)"
            severity = "warning" if outcome.stopped_after is not None or outcome.skipped else "information"
        except Exception as exc:
            message, severity = f"{self.queue.shown}: {action}: {fmt.one_line(str(exc), 300)}", "error"
        self.app.call_from_thread(self._bulk_ended, message, severity)

    def _bulk_ended(self, message: str, severity: Any) -> None:
        self.stopping = None
        self.refresh_bindings()
        self.app.notify(message, severity=severity, timeout=10)
        self.load()

    def action_stop(self) -> None:
        if self.stopping is not None:
            self.stopping.set()
            self.status("stopping after the batch in hand…", "yellow")

    def action_pause(self, pause: bool) -> None:
        if self.read_only:
            return
        if self.library.pause_mirrors is None:
            self.app.notify(f"{self.queue.source} cannot pause a queue: {self.library.pause_lacks}", severity="warning", timeout=8)
            return
        verb = "pause" if pause else "resume"

        def decided(yes: bool | None) -> None:
            if not yes:
                return

            def work() -> None:
                try:
                    self.backend.jobs_pause(self.queue, pause)
                    message, severity = f"{self.queue.shown}: {verb}d ({self.library.pause_mirrors})", "information"
                except Exception as exc:
                    message, severity = f"{self.queue.shown}: {verb}: {fmt.one_line(str(exc), 300)}", "error"
                self.app.call_from_thread(self.app.notify, message, severity=severity)

            self.run_worker(work, thread=True, group="jobs-act")

        question = f"{verb.capitalize()} queue {self.queue.shown!r}? It runs: {self.library.pause_mirrors}"
        self.app.push_screen(ConfirmScreen(question), decided)


def _state_style(state: str) -> str:
    return {"dead": "red", "in_flight": "cyan", "ready": "green", "blocked": "yellow", "delayed": "", "done": "dim"}.get(state, "")
