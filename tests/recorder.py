"""A handler for real worker processes in tests: `--handler tests.recorder:record` appends
`<message id> <attempt>` to a file per process under $QT_RECORD_DIR, so a test can check after
the fact which messages were processed, how often and on which attempt."""

from __future__ import annotations

import os


def record(message) -> None:
    directory = os.environ["QT_RECORD_DIR"]
    with open(os.path.join(directory, f"{os.getpid()}.log"), "a", encoding="ascii") as out:
        out.write(f"{message.id} {message.attempts}\n")


def read_records(directory) -> list[tuple[int, int]]:
    records = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="ascii") as handle:
            records.extend(tuple(int(x) for x in line.split()) for line in handle if line.strip())
    return records
