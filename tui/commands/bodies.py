"""Message bodies from the command line (`engine enqueue`, `engine ring put`): --body repeated
--count times, or one per line of --stdin; each checked before anything is written."""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from collections.abc import Iterable, Iterator

from dbcore.errors import UsageError

from .options import MAX_COUNT, positive_count

# A body's limits, stated in docs/engine.md. Nesting: Python's json parser recurses once per
# level and PostgreSQL's json parser checks its stack, so a body 100,000 levels deep is an internal
# error on one side or the other; 512 is far past any real document. Size: --stdin reads every
# body before writing one (all or none), so what it holds is bounded too (`< /dev/zero` included).
MAX_BODY_DEPTH = 512
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_STDIN_BYTES = 256 * 1024 * 1024
_JSON_STRUCTURE = re.compile(r'[\[\]{}"\\]')


def _check_body(text: str) -> str:
    """A body within its limits, then valid JSON as PostgreSQL's json type takes it (the text is
    kept exactly as given)."""
    from queues.table_queue import parse_json_body

    if len(text) > MAX_BODY_BYTES // 4 and len(text.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        raise UsageError(f"JSON body of more than {MAX_BODY_BYTES // 2**20} MiB: refused, nothing written")
    if text.count("[") + text.count("{") > MAX_BODY_DEPTH:  # only then can it be too deep
        depth, in_string, escaped_at = 0, False, -1
        for match in _JSON_STRUCTURE.finditer(text):  # brackets inside strings do not nest
            char, at = match.group(), match.start()
            if at == escaped_at:
                continue
            if in_string:
                if char == "\\":
                    escaped_at = at + 1
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char in "[{":
                depth += 1
                if depth > MAX_BODY_DEPTH:
                    raise UsageError(f"JSON body nested deeper than {MAX_BODY_DEPTH} levels: refused, nothing written")
            elif char in "]}":
                depth -= 1
    return parse_json_body(text)


def _stdin_bodies() -> list[str]:
    """Every --stdin line that is not blank, each checked, read a bounded line at a time."""
    stream = getattr(sys.stdin, "buffer", sys.stdin)  # bytes, where it has them
    bodies: list[str] = []
    total = number = 0
    while raw := stream.readline(MAX_BODY_BYTES + 2):  # room for the body's \r\n
        number += 1
        total += len(raw)
        if total > MAX_STDIN_BYTES or len(bodies) >= MAX_COUNT:
            raise UsageError(f"standard input holds more than {MAX_STDIN_BYTES // 2**20} MiB or {MAX_COUNT:,} bodies: "
                             "refused, nothing written")
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            raise UsageError(f"malformed JSON body on standard input line {number}: not valid UTF-8") from None
        body = line.strip()
        if body:
            try:
                bodies.append(_check_body(body))
            except UsageError as exc:
                raise UsageError(f"standard input line {number}: {exc}") from None
    return bodies


def bodies_from_args(args: argparse.Namespace) -> list[str] | Iterator[str] | None:
    """The bodies to write, validated now, before anything is written: every --stdin line is
    read and checked first (a list); --body is checked once and repeated lazily (--count may be
    large); None: the default bodies."""
    if args.stdin:
        return _stdin_bodies()
    if args.body is not None:
        return itertools.repeat(_check_body(args.body), args.count)
    return None


def batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def body_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=positive_count, default=1, help=f"number of messages (default 1, at most {MAX_COUNT:,})")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--body", help="JSON body, stored exactly as given (default: {\"n\": i}); at most "
                       f"{MAX_BODY_DEPTH} levels deep and {MAX_BODY_BYTES // 2**20} MiB")
    group.add_argument("--stdin", action="store_true",
                       help=f"read one JSON body per line from standard input (at most {MAX_STDIN_BYTES // 2**20} MiB in all)")
