"""A stub server on its own event loop in a thread, for clients that block (schemathesis's
calls, httpx's sync client) and so cannot share the test's loop; and the header they send.

Rule: it starts and stops the server; what is sent to it and checked stays in the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from semif_serve.decisions import calibration_file
from semif_serve.engine.stub import StubScorer
from semif_serve.engine.worker import Engine
from semif_serve.server import Server
from tests.fakes import settings as server_settings
from tests.wire_client import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextlib.contextmanager
def serving() -> Iterator[str]:
    """A stub server on its own event loop in a thread: schemathesis calls block."""
    # "triage": the plain table's none temperature, plus (extension) priors over 2 and 3 options
    # and a temperature for "prior", so every result shape can be asked for; "adaptive" escalates
    # always over 2 options (threshold 1) and never over 3 (threshold 0), with a temperature either way.
    priors = {
        2: calibration_file.FittedPrior((0.6, 0.4), 8, 1.0),
        3: calibration_file.FittedPrior((0.5, 0.3, 0.2), 8, 0.0),
    }
    settings = server_settings()
    table = calibration_file.Table(
        {"triage": {"none": 1.5, "prior": 1.2, "rotations": 1.1}}, priors={"triage": priors}
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> Server:
        engine = Engine(StubScorer(settings))
        await engine.start()
        server = Server(settings, engine, calibration=calibration_file.Loaded(table))
        await server.start()
        return server

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
