"""Numbers as the panels show them: exact, with thousands separators; ages and rates short."""

from __future__ import annotations

from rich.text import Text

BLOCKS = "▁▂▃▄▅▆▇█"


def count(value: int | None, estimate: bool = False) -> str:
    if value is None:
        return "-"
    return f"~{value:,}" if estimate else f"{value:,}"


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
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int(v / top * (len(BLOCKS) - 1) + 0.5))] for v in values)


def gauge(used: int, capacity: int, width: int = 12) -> Text:
    share = 0.0 if capacity <= 0 else min(1.0, used / capacity)
    filled = round(share * width)
    style = "bold red" if share >= 1.0 else "yellow" if share >= 0.8 else "green"
    return Text.assemble(("█" * filled, style), ("░" * (width - filled), "dim"), f" {used:,}/{capacity:,}")


def one_line(text: str | None, width: int = 80) -> str:
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
