"""wire._loose, the head check h11 leaves out, held to its rule written as one regex.

The rule (RFC 9112 2.2, 5.2; RFC 9110 5.5): a bare LF, a bare CR, an obs-fold line
(LF then SP or HTAB) or a control byte other than HTAB. The product counts instead
of matching, for speed; this regex is the oracle, kept only here.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from semif_serve.http.connection import _loose

RULE = re.compile(rb"(?<!\r)\n|\r(?!\n)|\n[ \t]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Bytes that matter to the rule, plus ordinary ones, so short strings hit every case.
ALPHABET = st.sampled_from(b"a: /\t\r\n\x00\x08\x0b\x0c\x0e\x1f\x7f\x80")


@settings(max_examples=3000)
@given(st.lists(ALPHABET, max_size=16).map(bytes))
def test_counting_agrees_with_the_rule(raw: bytes) -> None:
    assert _loose(raw) == (RULE.search(raw) is not None)


def test_a_clean_head_passes_and_each_looseness_is_caught() -> None:
    clean = b"GET /health HTTP/1.1\r\nhost: x\r\nx-a: tab\there\r\n\r\n"
    assert not _loose(clean)
    for loose in (b"\n", b"\r", b"\r\n ", b"\r\n\t", b"\x00", b"\x1f", b"\x7f", b"\x0b"):
        assert _loose(clean[:-2] + loose + b"\r\n"), loose
