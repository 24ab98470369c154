"""What a table's cell may hold and how wide it is: made inert (no markup, no control
character), measured, and shortened with an ellipsis (KeyedTable's, and the panels' lines)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

from dbcore.text import drop_partial_escape, inert


def inert_cell(value: object) -> object:
    """A cell as DataTable may be given it: no control character, and no `str` that it would read
    as markup (it does, measuring a column and on its general drawing path: a queue called `[/]x`
    would raise, `:warning:` would become an emoji). The panels make the database's text inert
    themselves; this is the net under every table."""
    if isinstance(value, str):
        if "[" not in value and value.count(":") < 2 and ((value.isascii() and value.isprintable()) or inert(value) == value):
            return value  # printable ASCII, the common case, is judged without a call
        return Text(inert(value))
    if isinstance(value, Text):
        plain = value.plain
        if not (plain.isascii() and plain.isprintable()) and inert(plain) != plain:
            return Text(inert(plain), style=value.style)  # its spans would no longer fit: the cell's style only
    return value


def cell_width(value: object) -> int:
    """How many cells a cell's text takes."""
    text = value.plain if isinstance(value, Text) else str(value)
    return len(text) if text.isascii() else cell_len(text)  # ASCII: one cell a character


def shorten(value: object, width: int) -> Text:
    """A text cell cut to `width` cells, its last one an ellipsis (never a number: only text
    columns are shortened)."""
    text = value.copy() if isinstance(value, Text) else Text(str(value))
    text.truncate(width, overflow="ellipsis")
    plain = text.plain
    if plain.endswith("…"):  # an escape (`\x1b`) is whole or cut off: half of one reads as other text
        kept = drop_partial_escape(plain[:-1])
        if len(kept) < len(plain) - 1:
            text.right_crop(len(plain) - len(kept))
            text.append("…")
    return text
