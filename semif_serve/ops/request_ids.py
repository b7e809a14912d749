"""Request ids: take the caller's `X-Request-Id` when it is usable, else make one.

Rule: an id is 1-128 visible ASCII characters (33-126), so it can be echoed in a
header and written in a log line without escaping surprises; anything else is
replaced, never truncated or repaired (a repaired id would not match the caller's).
"""

from __future__ import annotations

import re
import secrets

MAX_LENGTH = 128
VALID = re.compile(rb"[\x21-\x7e]{1,%d}" % MAX_LENGTH)


def generate() -> str:
    """A fresh id: 128 random bits in hex, unique across processes without coordination."""
    return secrets.token_hex(16)


def accept(value: bytes | None) -> str:
    """The caller's id when valid, else a generated one."""
    if value is not None and VALID.fullmatch(value):
        return value.decode("ascii")
    return generate()
