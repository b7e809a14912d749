"""Who may call: named bearer tokens from SEMIF_API_TOKENS_FILE, or SEMIF_API_TOKEN as the one caller `default`.

Rule 1: a token never appears in a message, a log line, a metric or a repr; only its caller's name
and its line in the file do (a refusal never echoes a field that could be a token).
Rule 2: `Callers.identify` hashes the presented token once and compares the digest with every one of
MAX_CALLERS slots (the unused ones hold random digests), with no exit that depends on a match: its time
tells neither which token came closest nor how many there are.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config import Settings, token_problem

MAX_CALLERS = 64  # bounds the `caller` label's cardinality, and the slots every check compares
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
UNAUTHENTICATED = "-"  # the metrics' and the access log's name for a request with no caller
DEFAULT = "default"  # the one caller of SEMIF_API_TOKEN (or SemIf's SEMIF_API_KEY)
NAME_RULE = "a caller's name must match [A-Za-z0-9._-]{1,64} and not be '-' alone"


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


@dataclass(frozen=True)
class Callers:
    """The callers and their tokens' digests, padded to MAX_CALLERS slots; `source` is the file, or None."""

    names: tuple[str, ...]
    source: str | None = None
    _slots: tuple[tuple[str | None, bytes], ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, pairs: Sequence[tuple[str, str]], source: str | None = None) -> Callers:
        """From checked (name, token) pairs: at most MAX_CALLERS, names and tokens each unique."""
        if len(pairs) > MAX_CALLERS:
            raise TokensFileError(f"at most {MAX_CALLERS} callers")
        slots: list[tuple[str | None, bytes]] = [
            (name, _digest(token.encode())) for name, token in pairs
        ]
        slots += [(None, os.urandom(32)) for _ in range(MAX_CALLERS - len(slots))]
        return cls(tuple(name for name, _ in pairs), source, tuple(slots))

    def identify(self, token: bytes) -> str | None:
        """The name whose token this is, or None; the same work whatever the token (Rule 2)."""
        presented = _digest(token)
        found = None
        for name, stored in self._slots:
            if hmac.compare_digest(presented, stored):
                found = name
        return found


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
    names: dict[str, int] = {}
    tokens: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        at = f"{where} line {number}"
        if len(fields) != 2:
            raise TokensFileError(
                f"{at}: {len(fields)} field(s); each line is one `name token` pair"
                if len(fields) > 2
                else f"{at}: a name without a token; each line is one `name token` pair"
            )
        name, token = fields
        if not NAME.fullmatch(name) or name == UNAUTHENTICATED:
            raise TokensFileError(f"{at}: {NAME_RULE}")
        if name in names:
            raise TokensFileError(
                f"{at}: caller {name!r} is named twice (first on line {names[name]})"
            )
        if (problem := token_problem(token)) is not None:
            raise TokensFileError(f"{at}: caller {name!r}'s token {problem}")
        if token in tokens:
            raise TokensFileError(
                f"{at}: caller {name!r} has the same token as line {tokens[token]}"
            )
        if len(pairs) == MAX_CALLERS:
            raise TokensFileError(f"{where} holds more than {MAX_CALLERS} callers")
        names[name], tokens[token] = number, number
        pairs.append((name, token))
    if not pairs:
        raise TokensFileError(f"{where} holds no caller (only blank lines and # comments)")
    return pairs
