"""Log lines on stderr, as text or one JSON object per line (`SEMIF_LOG_FORMAT`).

Rules: every record of the process goes through one handler configured here, so
in `json` mode every line on stderr parses as JSON, tracebacks included (as a
field). Structured data travels in the record's `fields` attribute
(`log.info(msg, extra={"fields": {...}})`); the formatter never looks at
anything else a caller might have attached. Settings are logged once at startup
with each secret (the token) replaced by REDACTED, or null where none is set.

Buffering (an extension, like nginx's `access_log ... buffer= flush=`): access
lines (the `semif_serve.access` logger) collect in the handler and go out in one
write when the buffer passes BUFFER_BYTES, when the server's flush timer fires
(`SEMIF_LOG_FLUSH_S`, at most 1 s; see `flush_periodically`), when any other
record arrives (which is then written at once, after them, in order), and at
shutdown (`logging.shutdown()` flushes every handler; cli.py calls it before
`os._exit`). A graceful shutdown loses no line; a SIGKILL can lose the access
lines of the last flush interval (at most BUFFER_BYTES), never another record.

The access line's direct path (perf): an access line is written per request, and
logging's LogRecord and Logger machinery cost more than the line itself. While
logging is as `configure` left it (`direct_access_handler` checks this per line:
the access logger enabled for INFO, not disabled, no filter on it or the handler,
no handler on the way to the root, and the root's only handler the configured one),
the access log hands its message and fields straight to that handler
(`BufferedStreamHandler.write_access`), which formats them with its formatter's
`format_access` (the same text, byte for byte, as `format` of the equivalent
record) and keeps them under its lock in the same buffer, so order and flushing are
exactly those of `emit`. Any other configuration (a test's capture handler, a
filter, a level an operator set on `semif_serve.access`) gets the ordinary
`logging` call, so standard logging config keeps its meaning.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from ..config import Settings, declared

REDACTED = "<redacted>"
ACCESS_LOGGER = "semif_serve.access"
BUFFER_BYTES = 64 * 1024


_second: list[Any] = [
    None,
    "",
]  # the last whole second formatted, and its text: one strftime a second


def utc_time(created: float) -> str:
    """ISO 8601 UTC with milliseconds, the shape log pipelines parse without a hint."""
    second = int(created)
    if _second[0] != second:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))]
    return f"{_second[1]}.{int(created % 1 * 1000):03d}Z"


# json.dumps with arguments builds a JSONEncoder per call; one built once encodes the same text.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line = _json_line(
            record.created,
            record.levelname,
            record.name,
            record.getMessage(),
            getattr(record, "fields", None) or {},
        )
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return _ENCODER.encode(line)

    def format_access(self, created: float, message: str, fields: Mapping[str, Any]) -> str:
        """`format` of an INFO access record made at `created`, without making the record."""
        return _ENCODER.encode(
            _json_line(created, logging.getLevelName(logging.INFO), ACCESS_LOGGER, message, fields)
        )


def _json_line(
    created: float, level: str, logger: str, message: str, fields: Mapping[str, Any]
) -> dict[str, Any]:
    """A JSON line's keys in their order: time, level, logger, message, then the fields."""
    return {
        "time": utc_time(created),
        "level": level.lower(),
        "logger": logger,
        "message": message,
        **fields,
    }


class TextFormatter(logging.Formatter):
    """The classic line, with the record's fields appended as key=value."""

    FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    MSEC_FORMAT = "%s,%03d"  # logging.Formatter.default_msec_format, typed as never None

    def __init__(self) -> None:
        super().__init__(self.FORMAT)
        self._second: tuple[int | None, str] = (None, "")  # as utc_time: one strftime a second

    def formatMessage(self, record: logging.LogRecord) -> str:
        return _with_fields(super().formatMessage(record), getattr(record, "fields", None))

    def format_access(self, created: float, message: str, fields: Mapping[str, Any]) -> str:
        """`format` of an INFO access record made at `created`, without making the record (the
        time as logging.Formatter.formatTime writes it with no datefmt)."""
        second = int(created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        asctime = self.MSEC_FORMAT % (self._second[1], int((created - second) * 1000))
        text = self.FORMAT % {
            "asctime": asctime,
            "levelname": logging.getLevelName(logging.INFO),
            "name": ACCESS_LOGGER,
            "message": message,
        }
        return _with_fields(text, fields)


def _with_fields(text: str, fields: Mapping[str, Any] | None) -> str:
    """The text line's key=value tail."""
    if fields:
        text += " " + " ".join(f"{key}={_text(value)}" for key, value in fields.items())
    return text


def _text(value: Any) -> str:
    """A bare word as is; anything with spaces, quotes or structure as JSON, so a line splits unambiguously."""
    if isinstance(value, str) and value and not any(ch.isspace() or ch in '"=\\' for ch in value):
        return value
    return (
        json.dumps(value, ensure_ascii=False, default=str)
        if isinstance(value, (dict, list, str))
        else str(value)
    )


class BufferedStreamHandler(logging.StreamHandler[TextIO]):
    """A StreamHandler that holds access lines back and writes them in one go (see the module's rules)."""

    def __init__(self, stream: Any, buffered: bool, limit: int = BUFFER_BYTES) -> None:
        super().__init__(stream)
        self.buffered = buffered
        self.limit = limit
        self._lines: list[str] = []
        self._size = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Called under the handler's lock: format, keep, and write when this record may not wait."""
        try:
            self._keep(self.format(record) + self.terminator, may_wait=record.name == ACCESS_LOGGER)
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise into the caller
            self.handleError(record)

    def write_access(self, created: float, message: str, fields: Mapping[str, Any]) -> None:
        """The access logger's direct path (see the module's rules): what `emit` does for an
        access record, under the same lock, into the same buffer, without the record."""
        with self.lock:  # type: ignore[union-attr]  # Handler.__init__ made it (createLock)
            try:
                self._keep(
                    self.formatter.format_access(created, message, fields) + self.terminator,  # type: ignore[union-attr]  # configure() set one of ours
                    may_wait=True,
                )
            except Exception:  # noqa: BLE001 - as emit: report, never raise into the caller
                self.handleError(
                    logging.makeLogRecord(
                        {
                            "name": ACCESS_LOGGER,
                            "msg": message,
                            "levelno": logging.INFO,
                            "levelname": logging.getLevelName(logging.INFO),
                        }
                    )
                )

    def _keep(self, line: str, may_wait: bool) -> None:
        """Hold a formatted line; write everything held now unless it may wait (an access line,
        buffering on, the buffer under its limit)."""
        self._lines.append(line)
        self._size += len(line)
        if not (self.buffered and may_wait) or self._size >= self.limit:
            self.flush()

    def flush(self) -> None:
        """Write what is held in one call, then flush the stream."""
        with self.lock:  # type: ignore[union-attr]  # Handler.__init__ made it (createLock)
            if self._lines:
                data, self._lines, self._size = "".join(self._lines), [], 0
                self.stream.write(data)
            if hasattr(self.stream, "flush"):
                self.stream.flush()


_configured: list[BufferedStreamHandler | None] = [None]  # the handler configure() installed


def direct_access_handler(logger: logging.Logger) -> BufferedStreamHandler | None:
    """The handler an INFO record of `logger` would reach, and the only one, when logging is as
    `configure` left it; None whenever anything else could see, drop or change the record."""
    handler = _configured[0]
    if (
        handler is None
        or not logger.isEnabledFor(logging.INFO)
        or logger.disabled
        or logger.filters
        or handler.filters
        or handler.level > logging.INFO
        or not hasattr(handler.formatter, "format_access")
    ):
        return None
    root = logging.root
    node: logging.Logger | None = logger
    while node is not root:
        if node is None or node.handlers or not node.propagate:
            return None
        node = node.parent
    return handler if len(root.handlers) == 1 and root.handlers[0] is handler else None


def flush() -> None:
    """Write every handler's held lines now."""
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001 - a broken stderr must not stop the server or its timer
            pass


async def flush_periodically(seconds: float) -> None:
    """The event loop's flush timer: held access lines wait at most `seconds` (run as a task, cancelled at exit)."""
    while True:
        await asyncio.sleep(seconds)
        flush()


def configure(log_format: str, flush_s: float = 0.0) -> None:
    """One stderr handler on the root logger, in the chosen format; access lines buffered when flush_s > 0."""
    handler = BufferedStreamHandler(sys.stderr, buffered=flush_s > 0)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    _configured[0] = handler
    root.setLevel(logging.INFO)
    # The logging HOWTO's "Optimization" switches: neither format uses the caller's file, the
    # thread or the process, and an access line is written per request.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def redacted_settings(settings: Settings) -> dict[str, Any]:
    """Every effective setting by name, a secret one replaced: REDACTED where it is set, null where
    it is not (the token, with a tokens file in use), so the line never shows a token that is not there."""
    values = {}
    for name, setting in declared().items():
        value = getattr(settings, name)
        values[name] = (REDACTED if value else None) if setting.secret else value
    return values


def log_settings(log: logging.Logger, settings: Settings) -> None:
    log.info("effective settings", extra={"fields": {"settings": redacted_settings(settings)}})
