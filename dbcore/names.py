"""Names an operator gives queuetop's objects: queues, rings, leases, declared queues.

Names are values in the registry, but they also become part of table names and of
`application_name`, so they are held to one conservative allow-list everywhere.
"""

from __future__ import annotations

import re

from .errors import UsageError

# Matched with fullmatch: `$` alone would let a trailing newline through ("abc\n").
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,47}")
NAME_HELP = "1-48 characters: letters, digits and _ . : - (starting with a letter or digit)"


def is_valid_name(name: object) -> bool:
    return isinstance(name, str) and NAME_RULE.fullmatch(name) is not None


def check_name(kind: str, name: object) -> str:
    """`name` if it is allowed, else a usage error (exit 2) that says what is."""
    if not isinstance(name, str) or not NAME_RULE.fullmatch(name):
        raise UsageError(f"invalid {kind} name {name!r}: use {NAME_HELP}")
    return name
