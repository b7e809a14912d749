"""Request targets (RFC 9112 3.2): the path a request line names, and whether its authority stands.

Rule 1: forms only. This module reads origin-form (`/decide?x`) and http(s) absolute-form
(`http://host/decide`, which RFC 9112 3.2.2 says a server MUST accept), and knows nothing
of routes, methods or responses: service/head_policy.py routes the path it returns, and any other form
(another scheme, `*`, `host:port`) is returned as sent, for routing to find no endpoint.
Rule 2: one reading. `path` (for the access log and the route label of a head no route
answered; it never raises) and `resolve` (for routing; it refuses) split a target the same
way, with urllib.
Rule 3: ambiguity is refused, not resolved. An absolute-form authority must name the host
the Host field names (RFC 9110 4.2.3's normal form: scheme and host case-blind, an
omitted port is the scheme's default). RFC 9112 says the server then ignores Host, but a
proxy in front may have routed or checked on either one, and which it used is unknowable.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

ABSOLUTE_SCHEMES = (b"http://", b"https://")
DEFAULT_PORTS = {"http": 80, "https": 443}


class BadTarget(ValueError):
    """An absolute-form target whose authority cannot be trusted; the message is safe to show."""


def _split(target: bytes) -> tuple[SplitResult | None, bytes]:
    """The absolute-form target split by urllib (None for any other form) and the path it names, no query.

    ValueError: an absolute-form target urllib cannot split (`http://[::1/`)."""
    if not target[:8].lower().startswith(ABSOLUTE_SCHEMES):
        return None, target.split(b"?", 1)[0]
    absolute = urlsplit(target.decode("latin-1"))
    return absolute, absolute.path.encode("latin-1") or b"/"


def path(target: bytes) -> bytes:
    """The path a target names, for the log and the metrics: as `resolve` reads it, or the target as sent."""
    try:
        return _split(target)[1]
    except ValueError:
        return target


def _authority(scheme: str, netloc: str) -> tuple[str, int]:
    """Host (lower case) and port (the scheme's default when omitted). ValueError: not a plain host."""
    parts = urlsplit(f"//{netloc}")
    if (
        "@" in netloc or not parts.hostname
    ):  # RFC 9110 4.2.4: userinfo in an http(s) URI is an error
        raise ValueError
    return parts.hostname, parts.port or DEFAULT_PORTS[scheme]


def resolve(target: bytes, host: bytes | None) -> bytes:
    """The path to route, once an absolute-form authority is shown to agree with Host (absent in HTTP/1.0)."""
    try:
        absolute, found = _split(target)
        if absolute is None:
            return found
        scheme = absolute.scheme.lower()
        named = _authority(scheme, absolute.netloc)
        agrees = host is None or _authority(scheme, host.decode("latin-1")) == named
    except ValueError:
        raise BadTarget(
            "the request target's authority or the Host field is not a valid host"
        ) from None
    if not agrees:
        raise BadTarget("the request target's authority and the Host field name different hosts")
    return found
