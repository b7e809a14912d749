"""Who may call: named bearer tokens from SEMIF_API_TOKENS_FILE, or SEMIF_API_TOKEN as the one caller `default`.

Rule 1: a token never appears in a message, a log line, a metric or a repr. Names and tokens are
disjoint by length (a name at most MAX_NAME_LENGTH characters, a token at least MIN_TOKEN_LENGTH),
so a swapped line or a line of two tokens fails on its name. A refusal names the setting, the file,
the line and the rule broken, never a field of the line; a name is shown only once its line passed
every check.
Rule 2: `Callers.identify` hashes the presented token once (SHA-256), looks the digest up in a dict
of digest -> name and confirms the hit with one `hmac.compare_digest` (INV-6); a miss compares with
a random decoy, so every check does the same work. The lookup's time depends on the digest alone,
which tells an attacker nothing about any token. The raw token is never a key, a value or a field.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..config import MIN_TOKEN_LENGTH, Settings, token_problem

MAX_CALLERS = 64  # names: bounds the `caller` label's cardinality
# Tokens one name may hold: its current one and the next, side by side through a rotation; so a
# file holds at most MAX_CALLERS * MAX_TOKENS_PER_CALLER tokens.
MAX_TOKENS_PER_CALLER = 2
MAX_NAME_LENGTH = MIN_TOKEN_LENGTH - 1  # Rule 1: no token can pass as a name
NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_NAME_LENGTH}}}")
UNAUTHENTICATED = "-"  # the metrics' and the access log's name for a request with no caller
DEFAULT = "default"  # the one caller of SEMIF_API_TOKEN (or SemIf's SEMIF_API_KEY)
NAME_RULE = (
    f"the name must match [A-Za-z0-9._-]{{1,{MAX_NAME_LENGTH}}} and not be '-' alone "
    "(a token, longer, never passes as a name: are the columns swapped?)"
)
PAIR_RULE = "each line is one `name token` pair"


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


@dataclass(frozen=True)
class Callers:
    """The callers' names (each once, in the file's order) and their tokens' digests; `source` is the file, or None."""

    names: tuple[str, ...]
    source: str | None = None
    _by_digest: Mapping[bytes, tuple[bytes, str]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _decoy: bytes = field(default_factory=lambda: os.urandom(32), repr=False, compare=False)

    @classmethod
    def of(cls, pairs: Sequence[tuple[str, str]], source: str | None = None) -> Callers:
        """From checked (name, token) pairs: a name may repeat (its tokens side by side), a token may not."""
        by_digest = {}
        for name, token in pairs:
            digest = _digest(token.encode())
            by_digest[digest] = (digest, name)
        return cls(tuple(dict.fromkeys(name for name, _ in pairs)), source, by_digest)

    def identify(self, token: bytes) -> str | None:
        """The name whose token this is, or None; one hash, one lookup, one compare (Rule 2)."""
        presented = _digest(token)
        stored, name = self._by_digest.get(presented, (self._decoy, None))
        return name if hmac.compare_digest(presented, stored) else None

    @property
    def tokens(self) -> int:
        """How many tokens the callers hold (a rotation holds two under one name)."""
        return len(self._by_digest)


class TokensFileError(ValueError):
    """SEMIF_API_TOKENS_FILE cannot be used: at startup the process stops (exit 2), on reload the old table stays."""


def for_settings(settings: Settings) -> Callers:
    """The callers the settings name: the tokens file's, or SEMIF_API_TOKEN's one caller `default`."""
    if settings.api_tokens_file is not None:
        return load(settings.api_tokens_file)
    return Callers.of([(DEFAULT, settings.api_token)])


def load(path: str) -> Callers:
    """Read and check a tokens file; a TokensFileError names the setting, the file and the line."""
    where = f"SEMIF_API_TOKENS_FILE {path}"
    try:
        mode = os.stat(path).st_mode  # follows symlinks: a Kubernetes Secret's files are links
        with open(path, encoding="utf-8", errors="replace") as file:
            text = file.read()
    except OSError as error:
        raise TokensFileError(f"{where} is unreadable: {error.strerror or error}") from None
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        raise TokensFileError(
            f"{where} is readable or writable by other users (mode {stat.S_IMODE(mode):04o}): "
            "chmod o-rw it (in Kubernetes, set the Secret volume's defaultMode: 0440)"
        )
    return Callers.of(parse(text, where), path)


def parse(text: str, where: str) -> list[tuple[str, str]]:
    """`name token` per line, whitespace apart; blank lines and lines starting with `#` skipped."""
    pairs: list[tuple[str, str]] = []
    lines_of: dict[str, list[int]] = {}  # name -> the lines of its tokens
    tokens: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        at = f"{where} line {number}"
        name, token = _pair(fields, at)
        if token in tokens:
            raise TokensFileError(
                f"{at}: the token is line {tokens[token]}'s too; a token belongs to one name only"
            )
        held = lines_of.get(name, [])
        if len(held) == MAX_TOKENS_PER_CALLER:
            raise TokensFileError(
                f"{at}: the name already holds {MAX_TOKENS_PER_CALLER} tokens (lines "
                f"{', '.join(map(str, held))}), the most one name may hold"
            )
        if not held and len(lines_of) == MAX_CALLERS:
            raise TokensFileError(f"{where} holds more than {MAX_CALLERS} callers (names)")
        lines_of[name], tokens[token] = [*held, number], number
        pairs.append((name, token))
    if not pairs:
        raise TokensFileError(f"{where} holds no caller (only blank lines and # comments)")
    return pairs


def _pair(fields: list[str], at: str) -> tuple[str, str]:
    """One line's name and token, each checked on its own; the refusal never shows either (Rule 1)."""
    if len(fields) != 2:
        raise TokensFileError(
            f"{at}: {len(fields)} fields; {PAIR_RULE}"
            if len(fields) > 2
            else f"{at}: one field; {PAIR_RULE}"
        )
    name, token = fields
    if not NAME.fullmatch(name) or name == UNAUTHENTICATED:
        raise TokensFileError(f"{at}: {NAME_RULE}")
    if (problem := token_problem(token)) is not None:
        raise TokensFileError(f"{at}: the token {problem}")
    return name, token
