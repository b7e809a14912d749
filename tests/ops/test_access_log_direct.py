"""The access line's direct path (logs.py, access_log.py): while logging is as `configure` left it,
an access line skips the LogRecord and goes straight into the configured handler's buffer. These
check that nothing observable changed: the same bytes as the record path in both formats, the same
order and flushing against other records, and that any other logging configuration (a level on
`semif_serve.access`, a filter, a second handler) gets the ordinary logging call and keeps its
meaning. The real process (which always takes the direct path) is checked in test_access_log.py and
test_loop_and_log_buffer.py."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from semif_serve.ops import access_log, logs
from semif_serve.ops.logs import ACCESS_LOGGER, JsonFormatter, TextFormatter

FIELDS: dict[str, Any] = {
    "request_id": 'id with "quotes" and ü',
    "peer": "[::1]:5555",
    "caller": "batch.ranker",
    "method": "POST",
    "path": "/decide",
    "status": 200,
    "code": None,
    "rows": 3,
    "bytes_in": 210,
    "bytes_out": 812,
    "queued_s": 1.5e-05,
    "scoring_s": None,
    "total_s": 0.000234,
}


def _record(created: float, message: str, fields: dict[str, Any]) -> logging.LogRecord:
    record = logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 0, message, None, None)
    record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
    record.fields = fields  # type: ignore[attr-defined]
    return record


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()], ids=["json", "text"])
@pytest.mark.parametrize(
    "created", [1796083200.0, 1796083200.999, 1796083201.5004, 1796169599.0405]
)
def test_format_access_writes_the_bytes_format_writes_for_the_same_record(
    formatter: logging.Formatter, created: float
) -> None:
    # Several seconds in a row, so the per-second time cache is crossed, not just hit.
    message = "POST /decide 200"
    assert formatter.format_access(created, message, FIELDS) == formatter.format(  # type: ignore[attr-defined]
        _record(created, message, FIELDS)
    )


@contextlib.contextmanager
def configured() -> Iterator[io.StringIO]:
    """configure('json', buffered) writing to a StringIO; root logging and the access logger restored after.
    Entered in the test body: pytest adds its capture handlers to the root for each phase, and
    configure() must replace those, as it replaces whatever a real process had."""
    root, access = logging.getLogger(), logging.getLogger(ACCESS_LOGGER)
    saved = (
        list(root.handlers),
        root.level,
        access.level,
        list(access.filters),
        logs._configured[0],
    )
    stream = io.StringIO()
    logs.configure("json", 0.5)
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    assert logs.direct_access_handler(access_log.log) is root.handlers[0]
    try:
        yield stream
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        access.setLevel(saved[2])
        access.filters[:] = saved[3]
        logs._configured[0] = saved[4]


def _access(request_id: str, status: int = 200) -> access_log.AccessRecord:
    return access_log.AccessRecord(
        request_id,
        "127.0.0.1:1",
        "-",
        "GET",
        "/health",
        status,
        None,
        0,
        10,
        20,
        None,
        None,
        0.0001234567,
    )


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_configured_logging_takes_the_direct_path_and_a_second_handler_does_not() -> None:
    with configured():
        handler = logging.getLogger().handlers[0]
        assert logs.direct_access_handler(access_log.log) is handler
        other = logging.NullHandler()
        logging.getLogger().addHandler(other)
        assert logs.direct_access_handler(access_log.log) is None
        logging.getLogger().removeHandler(other)
        logging.getLogger("semif_serve").addHandler(
            other
        )  # a handler on the way to the root sees it too
        try:
            assert logs.direct_access_handler(access_log.log) is None
        finally:
            logging.getLogger("semif_serve").removeHandler(other)
        assert logs.direct_access_handler(access_log.log) is handler


def test_direct_lines_wait_in_the_buffer_and_another_record_writes_them_first_in_order() -> None:
    with configured() as stream:
        access_log.write(_access("a1"))
        access_log.write(_access("a2"))
        assert stream.getvalue() == ""
        logging.getLogger("semif_serve.server").info("shutting down")
        access_log.write(_access("a3"))
        assert [line.get("request_id", line["message"]) for line in _lines(stream)] == [
            "a1",
            "a2",
            "shutting down",
        ]
        logs.flush()  # the timer's and shutdown's flush
        lines = _lines(stream)
    assert [line.get("request_id", line["message"]) for line in lines] == [
        "a1",
        "a2",
        "shutting down",
        "a3",
    ]
    assert list(lines[0]) == [
        "time",
        "level",
        "logger",
        "message",
        "request_id",
        "peer",
        "caller",
        "method",
        "path",
        "status",
        "code",
        "rows",
        "bytes_in",
        "bytes_out",
        "queued_s",
        "scoring_s",
        "total_s",
    ]
    assert (lines[0]["level"], lines[0]["logger"], lines[0]["message"], lines[0]["total_s"]) == (
        "info",
        ACCESS_LOGGER,
        "GET /health 200",
        0.000123,
    )


def test_the_direct_path_writes_what_the_record_path_writes() -> None:
    # A second handler forces the ordinary logging call; the configured handler's bytes must not change.
    with configured() as stream:
        access_log.write(_access("same"))
        logs.flush()
        capture = logging.NullHandler()
        logging.getLogger().addHandler(capture)
        try:
            access_log.write(_access("same"))
            logs.flush()
        finally:
            logging.getLogger().removeHandler(capture)
        direct, through_logging = stream.getvalue().splitlines()
    assert direct[direct.index('"level"') :] == through_logging[through_logging.index('"level"') :]


def test_a_level_or_filter_on_the_access_logger_still_silences_it() -> None:
    with configured() as stream:
        access = logging.getLogger(ACCESS_LOGGER)
        access.setLevel(logging.WARNING)
        access_log.write(_access("hidden-by-level"))
        access.setLevel(logging.NOTSET)
        access.addFilter(lambda record: record.fields["status"] != 404)  # type: ignore[attr-defined]
        access_log.write(_access("hidden-by-filter", 404))
        access_log.write(_access("shown"))
        logs.flush()
        assert [line["request_id"] for line in _lines(stream)] == ["shown"]


def test_a_broken_stream_is_reported_not_raised_into_the_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("stderr is gone")

    with configured() as stream:
        handler = logging.getLogger().handlers[0]
        handler.setStream(Broken())  # type: ignore[attr-defined]
        handler.buffered = False  # type: ignore[attr-defined]
        access_log.write(_access("lost"))  # must not raise
        assert "stderr is gone" in capsys.readouterr().err
        handler.setStream(stream)  # type: ignore[attr-defined]
        access_log.write(_access("after"))
        assert [line["request_id"] for line in _lines(stream)] == ["after"]
