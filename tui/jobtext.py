"""A queue's jobs as plain text (`queuetop jobs list` and `show` without --json): every cell inert
(arguments and errors are whatever an application wrote), figures whole."""

from __future__ import annotations

import json
from typing import Any

from dbcore.text import inert, inert_line
from jobs.model import Job

from .format import seconds
from .report import _table


def args_text(value: Any, width: int | None = None) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str) if value is not None else "-"
    return inert_line(text, width) if width else inert_line(text)


def when(value: Any) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S}" if value is not None else "-"


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def jobs_lines(jobs: list[Job]) -> list[str]:
    rows = [(j.id, j.state, j.status, j.kind or "-", j.attempts if j.attempts is not None else "-",
             seconds(j.age_s) if j.age_s is not None else "-", when(j.scheduled_at), args_text(j.args, 40),
             inert_line(j.last_error, 50) if j.last_error else "-") for j in jobs]
    return _table(f"{len(jobs)} job(s)", ("id", "state", "status", "kind", "attempts", "age", "scheduled", "args", "last error"),
                  rows).splitlines()


def job_lines(job: Job) -> list[str]:
    out = [f"{'id':<13}{inert(job.id)}", f"{'queue':<13}{inert(job.queue)}", f"{'state':<13}{job.state} ({inert(job.status)})",
           f"{'kind':<13}{inert(job.kind or '-')}",
           f"{'attempts':<13}{_or_dash(job.attempts)} of {_or_dash(job.max_attempts)}",
           f"{'created':<13}{when(job.created_at)}", f"{'scheduled':<13}{when(job.scheduled_at)}",
           f"{'held by':<13}{inert(job.held_by or '-')}", "arguments:"]
    pretty = json.dumps(job.args, ensure_ascii=False, indent=2, default=str) if job.args is not None else "-"
    out += ["  " + inert(line) for line in pretty.splitlines()]  # each line whole, its indentation kept
    out.append(f"errors ({len(job.errors)}):")
    for error in job.errors:
        text = error if isinstance(error, str) else json.dumps(error, ensure_ascii=False, default=str)
        out += ["  " + inert_line(line) for line in text.splitlines()[:40]]
    if job.extra:
        out.append("more:")
    for key, value in job.extra.items():
        out.append(f"  {inert(str(key))}: {inert_line(str(value), 200)}")
    return out
