"""Numbers as the panels show them: exact, with thousands separators; ages and rates short.
Text from the database as they show it: inert (dbcore/text.py), never markup."""

from __future__ import annotations

from bisect import bisect_left

from rich.cells import cell_len, set_cell_size
from rich.text import Span, Text

from dbcore.text import drop_partial_escape, inert, inert_line
from probes.model import BlockedSession, utc_text

BLOCKS = "▁▂▃▄▅▆▇█"


def count(value: int | None, estimate: bool = False) -> str:
    """An exact count in full (1,234,567); an estimate marked `~`, and past 10,000 in three
    significant figures (~23.3k, ~1.00M): its last digits mean nothing, and the column stays
    narrow enough to keep its neighbours on screen."""
    if value is None:
        return "-"
    if not estimate:
        return f"{value:,}"
    return f"~{compact(value)}" if abs(value) >= 10_000 else f"~{value:,}"


COUNTING = "counting…"  # a figure not known yet: the table is being read (probes/sources/tally.py)
# ... in a table's cell: no wider than the figures beside it (~1.07M), so that at 80 columns the
# rates keep their place (the help's legend says what it means).
COUNTING_CELL = "count…"


def figure(value: int | None, estimate: bool = False, counting: bool = False) -> str:
    """A queue's figure (count()) as a cell, or that it is being counted."""
    return COUNTING_CELL if counting and value is None else count(value, estimate)


def compact(value: int) -> str:
    """Three significant figures with a unit: 23.3k, 981k, 1.00M, 12.4G."""
    sign, v = ("-" if value < 0 else ""), abs(value)
    if v < 1_000:
        return f"{value:,}"
    for unit, size in (("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)):
        scaled = v / size
        if scaled < 999.5:
            digits = 0 if scaled >= 99.95 else 1 if scaled >= 9.995 else 2
            return f"{sign}{scaled:.{digits}f}{unit}"
    return f"{sign}{v / 1e12:,.0f}T"


def sessions(total: int, maximum: int | None) -> str:
    """Sessions against max_connections, `15/200` (the total alone when the maximum is unknown)."""
    return f"{total:,}/{maximum:,}" if maximum else f"{total:,}"


utc = utc_text  # a moment as the dashboard names it: UTC, to the second


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if -0.05 < value < 0:
        value = 0.0  # clocks a hair apart (xact_start vs the probe's now())
    negative = value < 0
    v = abs(value)
    if v < 60:
        text = f"{v:.1f}s"
    elif v < 3600:
        text = f"{int(v // 60)}m{int(v % 60):02d}s"
    elif v < 86400:
        text = f"{int(v // 3600)}h{int(v % 3600 // 60):02d}m"
    else:
        text = f"{int(v // 86400)}d{int(v % 86400 // 3600):02d}h"
    return f"-{text}" if negative else text


def rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def sparkline(values: list[float], width: int = 12) -> str:
    values = values[-width:]
    if not values:
        return ""
    top = max(values)
    if top <= 0:
        return BLOCKS[0] * len(values)
    scale = (len(BLOCKS) - 1) / top  # every value is at most top: no index past the last block
    return "".join([BLOCKS[int(v * scale + 0.5)] for v in values])


# A queue's verdict (probes/diagnosis.py) as the Queues column and the details say it.
VERDICT_STYLES = {"healthy": "green", "blocked": "bold red", "starved": "bold red", "no-consumers": "bold red", "failing": "bold red",
                  "bloat": "bold yellow", "saturated": "bold yellow", "not-judged": "dim"}
# At most 7 cells, as wide as the column's header: at 80 columns the verdict takes Delayed's place
# and the rates stay (the code in full, and why, in the details). Not judged (one sample, figures
# not read) is "unknown", as every figure that is not known: never a calm "ok". Starved is the
# pooler's verdict (its consumers wait in a PgBouncer pool), "nobody" no-consumers' (none at all).
VERDICT_WORDS = {"healthy": "ok", "no-consumers": "nobody", "saturated": "behind", "not-judged": "unknown"}


def verdict_word(code: str) -> str:
    return VERDICT_WORDS.get(code, code)


def trend(values: list[float], width: int = 12, *, styled: bool = True) -> Text | str:
    """A sparkline from 0 to its peak, and the peak after it: a bar's height means nothing
    without its scale (a depth of 1 draws a full bar). `styled=False`: a plain str, cheaper,
    for a column that is not on screen."""
    values = values[-width:]
    if not values:
        return ""
    spark = sparkline(values, width)
    line = f"{spark} {compact(int(max(values)))}"
    return Text(line, spans=[Span(0, len(spark), "cyan")]) if styled else line


def bar(used: int, capacity: int, width: int = 8) -> Text:
    """A filling bar alone (the figures are a column of their own)."""
    share = 0.0 if capacity <= 0 else min(1.0, used / capacity)
    filled = round(share * width)
    style = "bold red" if share >= 1.0 else "yellow" if share >= 0.8 else "green"
    return Text.assemble(("█" * filled, style), ("░" * (width - filled), "dim"))


def one_line(text: str | None, width: int = 80) -> str:
    """A text from the database (a query, an error) on one line, inert, cut to `width` characters
    with '…'; '-' when there is none."""
    return inert_line(text, width) if text else "-"


def inert_lines(text: str | None) -> str:
    """A long text from the database (a session's whole query) with its own lines kept, each
    inert, tabs as spaces; '-' when there is none. Only a newline breaks a line: a CR, a form
    feed or U+2028 is shown escaped, not obeyed."""
    if not text:
        return "-"
    return "\n".join(inert(line.expandtabs(4)) for line in text.split("\n"))


def plain(text: object, style: str = "") -> Text:
    """A text from the database as a cell or a label: inert, and a `Text` (a `str` would be read
    as markup by Rich's tables, Tree labels and Textual's Label: `[/]` would raise, `[@click=...]`
    would act)."""
    return Text(inert(text), style=style)


def cut(text: str, cells: int) -> str:
    """An inert `text` in at most `cells` terminal cells: whole, or cut with '…' (never inside an
    escape, nor half a wide character)."""
    if cell_len(text) <= cells:
        return text
    if cells < 1:
        return ""
    return drop_partial_escape(set_cell_size(text, cells - 1)) + "…"


def fit_by_priority(parts: list[tuple[str, str, int]], width: int) -> Text:
    """(text, style, priority) parts, shown in their order: the most important (lowest priority
    number) first, each whole or left out, as many as fit `width`. If the most important alone are
    too wide, the last of them is cut with an ellipsis (it must then be a text, not a figure).
    Every part is made inert: the status line and the host bar quote names and errors."""
    parts = [(inert(text), style, priority) for text, style, priority in parts]
    kept: set[int] = set()
    used = 0
    for index in sorted(range(len(parts)), key=lambda i: parts[i][2]):
        size = cell_len(parts[index][0])
        if used + size <= width:
            kept.add(index)
            used += size
        elif parts[index][2] == 0:  # must be shown: as much of it as fits
            room = width - used
            if room > 1:
                text, style, priority = parts[index]
                parts = [*parts[:index], (cut(text, room), style, priority), *parts[index + 1:]]
                kept.add(index)
                used = width
    return Text.assemble(*[(parts[i][0], parts[i][1]) for i in sorted(kept)])


def lock_target(b: BlockedSession, here: str | None, *, with_row: bool = True) -> str:
    """What a session waits on, as an operator names it: `row of accounts (0,1)` for a row wait
    (lock type transactionid or tuple), the relation, or the advisory key; and the database when
    it is not this one. Inert: every part of it is the server's text."""
    if b.lock_type in ("transactionid", "tuple") and b.relation:
        text = f"row of {b.relation}" + (f" {b.row}" if b.row and with_row else "")
    else:
        text = b.relation or b.lock_type or "?"
    if b.database and here and b.database != here and ":oid " not in text:
        text += f" (db {b.database})"
    return inert(text)


def wait_phrase(b: BlockedSession, here: str | None, *, parent: int | None = None, most: int | None = None,
                queued: bool = True) -> str:
    """A waiting session's wait as a DBA says it, from its own point of view: "wants to update a
    row of p6 (0,1) held by 4242", "wants ACCESS SHARE on t10 to SELECT queued behind 4243".
    Holders are those holding what it wants (every locker of a shared row); the others it waits
    behind only queue ahead of it. `parent`: the session the lock tree shows it under, which the
    tree says already (left out). `most`: name at most this many of those it queues behind, else
    count them (the 200th waiter of a pile-up queues behind 199 sessions); `queued=False` leaves them
    out (a group of waiters, each queued behind others). A recording from before `wants` says
    what it waits on. Inert."""
    if b.wants:
        text = f"wants {b.wants}"
        if b.database and here and b.database != here:
            text += f" (db {b.database})"
    else:
        text = f"waits on {lock_target(b, here)}"
    held = [str(p) for p in b.holders if p != parent] + [f"prepared {gid!r}" for gid in b.blocked_by_prepared]
    ahead: list[str] = []
    listed = queued and not b.ahead_unread  # (a pile-up read by its holders: its place is said after them)
    if listed and most is not None and len(b.blocked_by) > most + len(b.holders) + 1:
        # Counted, not named: a pile-up's 2,000th waiter queues behind 1,999 (a label each sample).
        ahead = [f"{queued_behind(b, parent):,} sessions"]
    elif listed:
        ahead = [str(p) for p in b.blocked_by if p not in b.holders and p != parent]
    if held and b.lock_type == "safe snapshot":  # the serializable transactions it waits out
        text += f" until {', '.join(held)} end{'s' if len(held) == 1 else ''}"
    elif held:
        text += f" held by {', '.join(held)}"
    if ahead and (b.wants or held):
        named = ", ".join(ahead) if most is None or len(ahead) <= most else f"{len(ahead):,} sessions"
        text += f"{',' if held else ''} queued behind {named}"
    if queued and b.ahead_unread:
        text += " (its place in the queue not read)"
    return inert(text)


def queued_behind(b: BlockedSession, parent: int | None = None) -> int:
    """How many sessions `b` only queues behind (its blockers but those holding what it wants and
    the one it is shown under): its place in a pile-up's line. Counted without a step per blocker
    (`blocked_by` is sorted, as the probes give it)."""
    ahead = b.blocked_by

    def named(pid: int) -> bool:
        at = bisect_left(ahead, pid)
        return at < len(ahead) and ahead[at] == pid

    return len(ahead) - sum(1 for p in {*b.holders, parent} if p is not None and named(p))


def blocks_text(count: int, processes: int | None) -> str:
    """How many sessions a root holds up, and the processes when its parallel workers wait too."""
    return f"{count:,}" + (f" ({processes:,} processes)" if processes is not None and processes > count else "")


# How the screen names each database (a snapshot's `server.dialect` is the machine's word).
DATABASE_NAMES = {"postgresql": "PostgreSQL", "mssql": "SQL Server"}


def database_name(dialect: str) -> str:
    return DATABASE_NAMES.get(dialect) or inert(dialect)  # a recording may say anything


def kilobytes(kb: int | None) -> str:
    """A size given in kB, in the unit that keeps it short: 812 kB, 12.3 MB, 1.50 GB."""
    if kb is None:
        return "-"
    if kb < 1000:
        return f"{kb} kB"
    if kb < 1_000_000:
        return f"{kb / 1024:.1f} MB"
    return f"{kb / 1024 / 1024:.2f} GB"


def byte_size(value: int | None) -> str:
    """A size in bytes, in the unit that keeps it short (binary, as kilobytes above): 0 B, 812 B,
    4.4 MB, 1.50 GB, 2.00 TB; "-" when it is not known."""
    if value is None:
        return "-"
    if value < 1024:
        return f"{value:,} B"
    for unit, size in (("kB", 1024), ("MB", 1024**2), ("GB", 1024**3)):
        if value < 1000 * size:
            return f"{value / size:.1f} {unit}" if unit != "GB" else f"{value / size:.2f} {unit}"
    return f"{value / 1024**4:,.2f} TB"
