"""A handler for real worker processes in tests: `--handler tests.recorder:record` appends
`<message id> <attempt> <batch>` to a file per process under $QT_RECORD_DIR, so a test can check
after the fact which messages were processed, how often and on which attempt (`batch` is the
body's "batch" key, or -1: it ties a message to the `engine enqueue` command that wrote it).

$QT_RECORD_WORK_S, if set, is how long each message "works" after it is recorded: the fault tests
use it so that a kill -9 or a restart lands, most often, between the record (the handler's side
effect) and the ack, where at-least-once delivery repeats a message."""

from __future__ import annotations

import json
import os
import time


def record(message) -> None:
    body = json.loads(message.body)
    batch = body.get("batch", -1) if isinstance(body, dict) else -1
    directory = os.environ["QT_RECORD_DIR"]
    with open(os.path.join(directory, f"{os.getpid()}.log"), "a", encoding="ascii") as out:
        out.write(f"{message.id} {message.attempts} {int(batch)}\n")
    work_s = float(os.environ.get("QT_RECORD_WORK_S") or 0)
    if work_s > 0:
        time.sleep(work_s)


def read_records(directory) -> list[tuple[int, ...]]:
    records = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="ascii") as handle:
            # A process killed mid-write may leave a last line without its newline: that record is whole
            # or absent, never a number cut short, because the line is written with one write() call.
            records.extend(tuple(int(x) for x in line.split()) for line in handle if line.endswith("\n"))
    return records
