"""The access log: one line per answered request on the `semif_serve.access` logger.

Rules: a line carries only the fields below, all derived by the server itself:
never a header value other than the request id, never the token (right or
wrong: the caller's name it identified, or `-`), never a body or a message built from one (a 422's message may quote the
body, so only its code is logged), never the query string. Format (text or JSON)
is logs.py's business, not this module's.

Theory: a line is written per request, so while logging is as the server
configured it, the message and fields go straight to the configured handler
(`logs.direct_access_handler`, `write_access`): same line, same buffer, same
order, no LogRecord. Otherwise (a level, filter or handler someone added) the
line is an ordinary `logging` call on `semif_serve.access` and obeys that config.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from . import logs

log = logging.getLogger("semif_serve.access")


@dataclass
class AccessRecord:
    """What one request did, as logged."""

    request_id: str
    peer: str
    caller: str  # the caller's name (extension), never its token; "-": not authenticated
    method: str
    path: str
    status: int
    code: str | None
    rows: int
    bytes_in: int
    bytes_out: int
    queued_s: float | None
    scoring_s: float | None
    total_s: float


def write(record: AccessRecord) -> None:
    fields = {
        "request_id": record.request_id,
        "peer": record.peer,
        "caller": record.caller,
        "method": record.method,
        "path": record.path,
        "status": record.status,
        "code": record.code,
        "rows": record.rows,
        "bytes_in": record.bytes_in,
        "bytes_out": record.bytes_out,
        "queued_s": _round(record.queued_s),
        "scoring_s": _round(record.scoring_s),
        "total_s": _round(record.total_s),
    }
    handler = logs.direct_access_handler(log)
    if handler is not None:
        handler.write_access(time.time(), f"{record.method} {record.path} {record.status}", fields)
    else:
        log.info("%s %s %d", record.method, record.path, record.status, extra={"fields": fields})


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)
