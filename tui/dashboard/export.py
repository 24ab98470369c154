"""Taking things away: `y` copies what is selected to the clipboard, `e` writes the focused table
as CSV. No widget here: the app and the Jobs screen hand their panel (or page) to these, and
notify what they return.

Copying goes through OSC 52 (Textual's `copy_to_clipboard`): the terminal puts the text on the
clipboard of the machine it runs on, so it works over SSH and inside tmux where the terminal
allows it (tmux: `set -g set-clipboard on`); nothing can tell whether it did, so the notice says
what was sent. What is copied is the whole value, never the clipped cell: the selected session's
query (Sessions, Locks; read whole from the database, as Enter's details do: a sample keeps its
first 300 characters; in a replay, those), the queue's, ring's or lease's name (what `queuetop jobs`, `snapshot`
and the engine commands take), a Connections row's state or application, and in the Jobs screen
the job under the cursor as `queuetop jobs show --json` prints it.

An export holds every row the panel lists now (after its filter, in its order) with the
snapshot's values, whole: numbers as numbers, times in ISO-8601 (UTC), lists space-separated,
maps as JSON, a header row of the model's field names. It is written into $QUEUETOP_EXPORT_DIR,
else the user's data directory (`exports/`), as a file created afresh (mode 600: queries may
hold secrets), never through a symbolic link, and named only once whole (written to a hidden
temporary file, then linked to its name, which never replaces a file).
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platformdirs import user_data_dir
from textual.notifications import SeverityLevel

from probes.jsonform import jsonable, type_hints_of
from probes.model import BlockedSession, Blocker, LeaseSample, QueueSample, RingSample, SessionSample, Snapshot
from probes.postgres import SESSION_QUERY_CHARS
from probes.recorder import write_all

from ..widgets.keyed_table import KeyedTable
from ..widgets.panels import ConnectionsPanel, LeasesPanel, LocksPanel, QueuesPanel, RingsPanel, SessionsPanel
from ..widgets.panels.base import Panel

ENV_EXPORT_DIR = "QUEUETOP_EXPORT_DIR"
CLIPBOARD = "OSC 52: the terminal must allow it (tmux: set -g set-clipboard on)"

Notice = tuple[str, SeverityLevel]


# -- y: copy ----------------------------------------------------------------------------------


def copy_selected(app: Any, panel: Panel | None, snapshot: Snapshot | None, backend: Any = None) -> Notice | None:
    """What `y` copies in the focused panel, copied; the notice that says what (None: a session's
    query is being read from the database, and its notice comes when it is copied)."""
    if isinstance(panel, SessionsPanel):
        session = panel.selected_session()
        if session is None:
            return "no session under the cursor: nothing copied", "warning"
        return _copy_session_query(app, backend, session.pid, session.backend_start, session.query)
    if isinstance(panel, LocksPanel):
        pid = panel.selected_pid
        if pid is None:
            return "no session under the cursor in the Locks tree: nothing copied", "warning"
        started = next((s.backend_start for s in snapshot.sessions if s.pid == pid), None) if snapshot is not None else None
        return _copy_session_query(app, backend, pid, started, _query_of(pid, snapshot))
    if isinstance(panel, (QueuesPanel, RingsPanel, LeasesPanel, ConnectionsPanel)):
        key = panel.query_one(KeyedTable).cursor_key()
        text = _name_of(panel, key, snapshot)
        if text is None:
            return f"no row under the cursor in the {panel.title_text or 'panel'}: nothing copied", "warning"
        what = {QueuesPanel: "queue", RingsPanel: "ring", LeasesPanel: "lease"}.get(type(panel), "name")
        app.copy_to_clipboard(text)
        return f"copied the {what} name {text!r} ({CLIPBOARD})", "information"
    return "y copies in Sessions and Locks (a query), Queues, Rings, Leases and Connections (a name): nothing here", "warning"


def _copy_session_query(app: Any, backend: Any, pid: int, started: datetime | None, sampled: str | None) -> Notice | None:
    """The session's whole query, read in a worker thread (the sample's is cut at 300 characters),
    then copied on the event loop with its notice; with no database (a replay), the sample's."""
    if backend is None:
        said = _copy_query(app, pid, sampled)
        if sampled and len(sampled) >= SESSION_QUERY_CHARS:
            said = (said[0] + f" (the first {SESSION_QUERY_CHARS} characters: all a sample keeps)", said[1])
        return said

    def fetch() -> None:
        try:
            details = backend.session_details(pid, started) if started is not None else backend.session_details(pid)
        except Exception as exc:  # the database unreachable: the sample's text, said so
            said = _copy_query(app, pid, sampled) if sampled else (f"pid {pid}'s query could not be read", "error")
            app.call_from_thread(app.notify, f"{said[0]} (the sampled text: {str(exc).splitlines()[0][:120]})",
                                 severity="warning")
            return
        session = details.get("session")
        if session is None:
            app.call_from_thread(app.notify, f"session {pid} has ended: nothing copied", severity="warning")
            return

        def copy() -> None:
            said, severity = _copy_query(app, pid, session["query"])
            app.notify(said, severity=severity, timeout=6)
        app.call_from_thread(copy)

    app.run_worker(fetch, thread=True, name=f"copy {pid}", group="copy")
    return None


def _copy_query(app: Any, pid: int, query: str | None) -> Notice:
    if not query:
        return f"pid {pid} has no query to copy", "warning"
    app.copy_to_clipboard(query)
    return f"copied pid {pid}'s query ({len(query):,} characters; {CLIPBOARD})", "information"


def _query_of(pid: int, snapshot: Snapshot | None) -> str | None:
    """A session's whole query: the sessions view's, else the lock probe's."""
    if snapshot is None:
        return None
    for session in snapshot.sessions:
        if session.pid == pid and session.query:
            return session.query
    locks: list[Blocker | BlockedSession] = [*snapshot.blockers, *snapshot.blocked]
    for lock in locks:
        if lock.pid == pid and lock.query:
            return lock.query
    return None


def _name_of(panel: Panel, key: str | None, snapshot: Snapshot | None) -> str | None:
    """The whole name a table row stands for (its key is `source:name` in Queues, `state:NAME`
    or `app:NAME` in Connections, the name in Rings and Leases)."""
    if key is None or snapshot is None:
        return None
    if isinstance(panel, QueuesPanel):
        queue = next((q for q in snapshot.queues if f"{q.source}:{q.name}" == key), None)
        return queue.name if queue is not None else key.partition(":")[2] or None
    if isinstance(panel, ConnectionsPanel):
        return key.partition(":")[2] or None
    names = {r.name for r in snapshot.rings} if isinstance(panel, RingsPanel) else {lease.name for lease in snapshot.leases}
    return key if key in names else None  # not the line that says why the panel's figures are unknown


def copy_job(app: Any, queue: Any, job: Any) -> Notice:
    """`y` in the Jobs screen: the job under the cursor as `queuetop jobs show --json` prints it."""
    if job is None:
        return "no job under the cursor: nothing copied", "warning"
    text = json.dumps({"queue": queue.shown, "source": queue.source, "job": job.to_json(whole=True)}, separators=(", ", ": "))
    app.copy_to_clipboard(text)
    return f"copied job {job.id} as JSON ({len(text):,} characters; {CLIPBOARD})", "information"


# -- e: export --------------------------------------------------------------------------------


def export_focused(panel: Panel | None, snapshot: Snapshot | None, directory: Path | None = None) -> Notice:
    """`e`: the focused panel's rows as a CSV file; the notice names it."""
    if panel is None:
        return "e exports the focused panel: move to one with Tab", "warning"
    name = str(panel.id or "panel")
    if snapshot is None:
        return "no sample yet: nothing to export", "warning"
    rows = panel_rows(panel, snapshot)
    if rows is None:
        return (f"the {panel.title_text or name} panel has no export (e exports Sessions, Queues, Locks, Connections, "
                "Rings, Leases and the Jobs screen)", "warning")
    header, lines = rows
    return write_export(name, header, lines, directory)


def panel_rows(panel: Panel, snapshot: Snapshot) -> tuple[list[str], list[list[object]]] | None:
    """The header and the rows of what `panel` lists now, in its order, from `snapshot`'s values
    (None: a panel with no export)."""
    if isinstance(panel, SessionsPanel):
        sessions = [panel.session_of_key(key) for key in _keys(panel)]
        return _table(SessionSample, [s for s in sessions if s is not None])
    if isinstance(panel, QueuesPanel):
        by_key = {f"{q.source}:{q.name}": q for q in snapshot.queues}
        return _table(QueueSample, [by_key[key] for key in _keys(panel) if key in by_key])
    if isinstance(panel, RingsPanel):
        rings = {r.name: r for r in snapshot.rings}
        return _table(RingSample, [rings[key] for key in _keys(panel) if key in rings])
    if isinstance(panel, LeasesPanel):
        leases = {lease.name: lease for lease in snapshot.leases}
        return _table(LeaseSample, [leases[key] for key in _keys(panel) if key in leases])
    if isinstance(panel, ConnectionsPanel):
        return _connection_rows(panel, snapshot)
    if isinstance(panel, LocksPanel):
        return _lock_rows(panel)
    return None


def _keys(panel: Panel) -> list[str]:
    """The keys of the rows the panel's table lists, in their order (the filter applied)."""
    table = panel.query_one(KeyedTable)
    return [str(key.value) for key in table.ordered_keys() if key.value is not None]


def _connection_rows(panel: ConnectionsPanel, snapshot: Snapshot) -> tuple[list[str], list[list[object]]]:
    c = snapshot.connections
    rows: list[list[object]] = []
    if c is not None:
        for key in _keys(panel):
            kind, _, name = key.partition(":")
            counts = c.by_state if kind == "state" else c.by_application if kind == "app" else {}
            if name in counts:
                rows.append([kind, name, counts[name]])
    return ["by", "name", "sessions"], rows


LOCK_ROLE = "role"  # root (holds others up and waits on no one) or blocked


def _lock_rows(panel: LocksPanel) -> tuple[list[str], list[list[object]]]:
    """The Locks tree flattened: a row per session it shows (the root blockers first, in the
    tree's order, then each waiting session), with its lock's facts."""
    layout = panel._layout  # the tree as shown: the filter applied
    blocked_fields = _columns(BlockedSession)
    root_fields = [name for name in _columns(Blocker) if name not in blocked_fields]
    header = [LOCK_ROLE, *blocked_fields, *root_fields]
    rows: list[list[object]] = []
    if layout is None:
        return header, rows
    for role, members in (("root", layout.roots.values()), ("blocked", layout.blocked.values())):
        for member in members:
            values = _flat(member)
            rows.append([role, *(values.get(name) for name in header[1:])])
    return header, rows


def jobs_rows(jobs: Sequence[Any]) -> tuple[list[str], list[list[object]]]:
    """A page of jobs as `queuetop jobs list --json` gives each (arguments as JSON text)."""
    documents = [job.to_json() for job in jobs]
    header = list(documents[0]) if documents else ["id", "queue", "state", "status", "kind", "attempts", "max_attempts",
                                                   "created_at", "scheduled_at", "age_s", "last_error", "args", "held_by"]
    return header, [[document.get(name) for name in header] for document in documents]


def _columns(cls: type) -> list[str]:
    """A sample class's field names, a nested sample's as `outer.inner` (a queue's verdict)."""
    names: list[str] = []
    for f in fields(cls):
        nested = _nested_class(cls, f.name)
        names += [f"{f.name}.{inner}" for inner in _columns(nested)] if nested is not None else [f.name]
    return names


def _nested_class(cls: type, name: str) -> type | None:
    hint = type_hints_of(cls).get(name)
    for candidate in (hint, *getattr(hint, "__args__", ())):
        if isinstance(candidate, type) and is_dataclass(candidate):
            return candidate
    return None


def _flat(sample: object, prefix: str = "") -> dict[str, object]:
    values: dict[str, object] = {}
    for f in fields(sample):  # type: ignore[arg-type]
        value = getattr(sample, f.name)
        if is_dataclass(value) and not isinstance(value, type):
            values.update(_flat(value, f"{prefix}{f.name}."))
        else:
            values[f"{prefix}{f.name}"] = value
    return values


def _table(cls: type, samples: Iterable[object]) -> tuple[list[str], list[list[object]]]:
    header = _columns(cls)
    return header, [[flat.get(name) for name in header] for flat in map(_flat, samples)]


def cell(value: object) -> object:
    """A value as a CSV cell: whole, numbers as numbers, times ISO-8601 (UTC), lists
    space-separated, maps and nested lists as JSON, true/false, nothing for None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, datetime):
        return jsonable(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value):
        return " ".join(str(v) for v in value)
    return json.dumps(jsonable(value), ensure_ascii=False, default=str, separators=(",", ":"))


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180: what spreadsheets read
    writer.writerow(header)
    writer.writerows([cell(v) for v in row] for row in rows)
    return out.getvalue()


def export_dir() -> Path:
    """Where exports go: $QUEUETOP_EXPORT_DIR, else the user's data directory's `exports/`."""
    given = os.environ.get(ENV_EXPORT_DIR, "")
    return Path(given) if given else Path(user_data_dir("queuetop")) / "exports"


def write_export(name: str, header: Sequence[str], rows: list[list[object]], directory: Path | None = None,
                 *, now: datetime | None = None) -> Notice:
    """Write the CSV; the notice names the file, or says why it could not be written."""
    directory = directory or export_dir()
    stamp = f"{(now or datetime.now(UTC)):%Y%m%d-%H%M%S}"
    try:
        path = write_new_file(directory, f"queuetop-{name}-{stamp}", ".csv", csv_text(header, rows).encode("utf-8"))
    except OSError as exc:
        return f"cannot export to {directory}: {exc.strerror or exc}", "error"
    return f"exported {len(rows):,} row(s) to {path}", "information"


def write_new_file(directory: Path, stem: str, suffix: str, data: bytes) -> Path:
    """`data` as a new file in `directory` (made, mode 700, if missing): written whole to a
    hidden temporary file (mode 600, created afresh, never through a link), then given its name
    by a hard link, which fails rather than replace a file (`-2`, `-3`, ... then); a file is never
    seen half-written under its name."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if directory.is_symlink():
        raise OSError(0, f"{directory} is a symbolic link: exports go into a directory of their own")
    temporary = directory / f".{stem}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        for n in range(1, 1000):
            path = directory / f"{stem}{'' if n == 1 else f'-{n}'}{suffix}"
            try:
                os.link(temporary, path, follow_symlinks=False)
            except FileExistsError:
                continue
            return path
        raise OSError(0, f"too many exports named {stem}{suffix} in {directory}")
    finally:
        temporary.unlink(missing_ok=True)
