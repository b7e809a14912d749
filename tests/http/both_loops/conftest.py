"""Tests here run once on asyncio's loop and once on uvloop, the two loops the server runs on.

They exercise the socket side (semif_serve/http/channel.py), where the loops differ: uvloop
can report a client's last bytes and its EOF in one turn, asyncio in two.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

import pytest


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    try:
        import uvloop
    except ImportError:  # the test extra brings it: in CI its absence is a failure
        if os.environ.get("CI") == "true":
            raise
        return {"asyncio": asyncio.new_event_loop}
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
