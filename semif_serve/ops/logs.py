"""Log lines on stderr, as text or one JSON object per line (`SEMIF_LOG_FORMAT`).

Rules: every record of the process goes through one handler configured here, so
in `json` mode every line on stderr parses as JSON, tracebacks included (as a
field). Structured data travels in the record's `fields` attribute
(`log.info(msg, extra={"fields": {...}})`); the formatter never looks at
anything else a caller might have attached. Settings are logged once at startup
with the token replaced by REDACTED.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"
FORMATS = ("text", "json")


def utc_time(created: float) -> str:
    """ISO 8601 UTC with milliseconds, the shape log pipelines parse without a hint."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"time": utc_time(record.created), "level": record.levelname.lower(),
                                "logger": record.name, "message": record.getMessage()}
        line.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The classic line, with the record's fields appended as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        fields = getattr(record, "fields", None)
        if fields:
            text += " " + " ".join(f"{key}={_text(value)}" for key, value in fields.items())
        return text


def _text(value: Any) -> str:
    """A bare word as is; anything with spaces, quotes or structure as JSON, so a line splits unambiguously."""
    if isinstance(value, str) and value and not any(ch.isspace() or ch in '"=\\' for ch in value):
        return value
    return json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, (dict, list, str)) else str(value)


def configure(log_format: str) -> None:
    """One stderr handler on the root logger, in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # The logging HOWTO's "Optimization" switches: neither format uses the caller's file, the
    # thread or the process, and an access line is written per request.
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def redacted_settings(settings: Any) -> dict[str, Any]:
    """Every effective setting by name, the token replaced."""
    values = {}
    for item in dataclasses.fields(settings):
        value = getattr(settings, item.name)
        values[item.name] = REDACTED if item.name == "api_token" else _plain(value)
    return values


def _plain(value: Any) -> Any:
    """Mappings (the calibration table and its read-only views) as plain dicts, for JSON."""
    return {key: _plain(inner) for key, inner in value.items()} if isinstance(value, Mapping) else value


def log_settings(log: logging.Logger, settings: Any) -> None:
    log.info("effective settings", extra={"fields": {"settings": redacted_settings(settings)}})
