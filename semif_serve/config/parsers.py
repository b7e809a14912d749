"""How one variable's text becomes a setting's value: each parser takes the name it was read under
and its raw text, and returns the value or raises a ValueError that starts with that name and says
what is allowed (contract: C1, S1, S8). A parser never reads the environment and knows no other setting.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from typing import Any

MIN_TOKEN_LENGTH = 32
TOKEN_RULE = f"at least {MIN_TOKEN_LENGTH} characters of visible ASCII (33-126)"
# How to make one, said wherever a token is missing or refused.
TOKEN_RECIPE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one"
MAX_PORT = 65535
MAX_LOG_FLUSH_S = 1.0
# A model alias: visible ASCII without a comma (the list's separator), like a model id.
MAX_ALIAS_LENGTH = 100

Parser = Callable[[str, str], Any]


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def auto_metrics() -> bool:
    """SEMIF_METRICS=auto (the default): on when prometheus_client is installed."""
    return _installed("prometheus_client")


def auto_event_loop() -> str:
    """SEMIF_EVENT_LOOP=auto (the default): uvloop when installed (the `fast` extra), else asyncio."""
    return "uvloop" if _installed("uvloop") else "asyncio"


def token_problem(token: str) -> str | None:
    """Why a token cannot be used, or None. A CR, LF or NUL can never arrive in a header, so such a
    token would lock its caller out (S2); a short one is guessable."""
    if any(not 33 <= ord(ch) <= 126 for ch in token):  # said first: `é` is one character, two bytes
        return f"holds a character outside visible ASCII (33-126); it must be {TOKEN_RULE}"
    if len(token) < MIN_TOKEN_LENGTH:
        return f"is shorter than {MIN_TOKEN_LENGTH} characters; it must be {TOKEN_RULE}"
    return None


def token(name: str, raw: str) -> str:
    if (problem := token_problem(raw)) is not None:
        raise ValueError(f"{name} {problem} ({TOKEN_RECIPE})")
    return raw


def path(name: str, raw: str) -> str:
    """A file's path: any text but the empty one, which names no file."""
    if not raw:
        raise ValueError(f"{name} is set but empty: set it to a file's path, or unset it")
    return raw


def text(name: str, raw: str) -> str:
    """Taken as written (a path whose file is read and judged later, by its reader)."""
    return raw


def nonempty(name: str, raw: str) -> str:
    if not raw:
        raise ValueError(f"{name} must not be empty")
    return raw


def positive_int(name: str, raw: str) -> int:
    # int() accepts "+5", " 5", "5_000" and non-ASCII digits: none of those is a plain count.
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {raw!r}")
    return int(raw)


def non_negative_int(name: str, raw: str) -> int:
    if not (raw.isascii() and raw.isdigit()):
        raise ValueError(f"{name} must be an integer >= 0, got {raw!r}")
    return int(raw)


def port(name: str, raw: str) -> int:
    value = positive_int(name, raw)
    if value > MAX_PORT:
        raise ValueError(f"{name} must be 1..{MAX_PORT}, got {value}")
    return value


def positive_float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    # 0 used to mean "uncapped"; now a cap is either a real cap or absent.
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {raw!r}")
    return value


def fraction(name: str, raw: str) -> float:
    """A share of something, 0..1 inclusive (0: none, 1: all)."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:  # NaN fails both comparisons
        raise ValueError(f"{name} must be between 0 and 1, got {raw!r}")
    return value


def optional_positive_float(name: str, raw: str) -> float | None:
    """As `positive_float`, for a setting that may be absent: empty means unset."""
    return None if raw == "" else positive_float(name, raw)


def optional_text(name: str, raw: str) -> str | None:
    """Empty means unset."""
    return raw or None


def choice(*allowed: str) -> Parser:
    """One of `allowed`, exactly as written."""

    def parse(name: str, raw: str) -> str:
        if raw not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
        return raw

    return parse


def switch(name: str, raw: str) -> bool:
    """`on` or `off`."""
    return bool(choice("on", "off")(name, raw) == "on")


def device(name: str, raw: str) -> str:
    value = nonempty(name, raw)
    if value == "auto":  # SemIf's default: whatever accelerator it finds
        raise ValueError(
            f"{name}=auto (SemIf's default) is refused: INV-3 wants the device said explicitly, "
            f"so a missing GPU never falls back to CPU; set {name} to cuda, cuda:N or cpu"
        )
    # N as plain ASCII digits: `cuda:x` or `cuda:+1` would pass here and fail only at load (exit 1).
    index = value.removeprefix("cuda:")
    if value not in ("cpu", "cuda") and not (
        index != value and index.isascii() and index.isdigit()
    ):
        raise ValueError(f"{name} must be cuda, cuda:N or cpu, got {value!r}")
    return value


def metrics(name: str, raw: str) -> bool:
    """`auto`: `auto_metrics`, as the default is; `on` insists on it; `off`."""
    value = choice("auto", "on", "off")(name, raw)
    installed = auto_metrics()
    if value == "on" and not installed:
        raise ValueError(f"{name}=on needs prometheus_client: pip install 'semif-serve[metrics]'")
    return value != "off" and installed


def event_loop(name: str, raw: str) -> str:
    """`auto`: `auto_event_loop`, as the default is; `uvloop` insists on it."""
    value = choice("auto", "asyncio", "uvloop")(name, raw)
    if value == "uvloop" and not _installed("uvloop"):
        raise ValueError(f"{name}=uvloop needs uvloop: pip install 'semif-serve[fast]'")
    return auto_event_loop() if value == "auto" else value


def log_flush(name: str, raw: str) -> float:
    """Seconds an access line may wait in the buffer: 0 (unbuffered) up to 1, like nginx's `flush=`."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if not 0 <= value <= MAX_LOG_FLUSH_S:
        raise ValueError(f"{name} must be 0..{MAX_LOG_FLUSH_S:g}, got {raw!r}")
    return value


def aliases(name: str, raw: str) -> tuple[str, ...]:
    """Comma-separated names; empty means none."""
    names = tuple(alias.strip() for alias in raw.split(",")) if raw.strip() else ()
    for alias in names:
        if (
            not alias
            or len(alias) > MAX_ALIAS_LENGTH
            or any(not 33 <= ord(ch) <= 126 for ch in alias)
        ):
            raise ValueError(
                f"{name} must be comma-separated names of 1..{MAX_ALIAS_LENGTH} "
                f"visible ASCII characters, got {raw!r}"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"{name} names a model twice: {raw!r}")
    return names
