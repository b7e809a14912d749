"""SIGHUP while the server starts or stops: never the default action (terminate); before ready it is
logged and applied once the server is ready, after the drain begins it is logged as ignored.

Rule 1: `hold()` runs on `serve`'s first line, before torch or transformers are imported: from then
on a SIGHUP never kills the process. A replica still loading its model (a rolling restart, every pod
told to reload a changed Secret) keeps loading. SIGTERM and SIGINT keep their default until the
server is ready, so stopping a starting server stays immediate.
Rule 2: SIGHUPs before ready are applied once, when the server is ready: the files they ask to
re-read may have changed after startup read them, and one re-read reads the latest.
Rule 3: the Python-level handler only counts (a handler that logged could interrupt a log write on
the same thread); each line is written from the event loop, once it runs (`Hangups`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("semif_serve.reload")
_counted = [0]  # SIGHUPs the Python-level handler took (before the event loop's handler)


def hold() -> None:
    """From the entry point's first line: a SIGHUP is counted, never the default action (Rule 1)."""
    signal.signal(signal.SIGHUP, _count)


def _count(signum: int, frame: FrameType | None) -> None:
    _counted[0] += 1


class Hangups:
    """The event loop's SIGHUP handler through startup, readiness and shutdown."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take SIGHUP on the loop (first, so none falls between), then log those counted before it."""
        self.loop = loop
        self.pending = False
        loop.add_signal_handler(signal.SIGHUP, self._starting)
        if _counted[0]:
            _counted[0] = 0
            self._starting()

    def _starting(self) -> None:
        self.pending = True
        log.info(
            "SIGHUP before the server is ready: the tokens file and SEMIF_CALIBRATION are "
            "re-read once it is"
        )

    def ready(self, reload: Callable[[], None]) -> None:
        """From now on a SIGHUP reloads; one received while starting is applied now (Rule 2)."""
        self.loop.add_signal_handler(signal.SIGHUP, reload)
        if self.pending:
            log.info("SIGHUP: applying the one received while starting")
            reload()

    def stopping(self) -> None:
        """The drain has begun: a SIGHUP is logged as ignored, never the default action."""
        self.loop.add_signal_handler(signal.SIGHUP, self._ignored)

    @staticmethod
    def _ignored() -> None:
        log.info("SIGHUP while shutting down: ignored")
