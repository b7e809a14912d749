"""A real `python -m semif_serve` child on the stub scorer, for tests that need the process:
its signals, its exit status, its stderr.

Rule: this module starts and reads the process; what a test expects of it stays in the test.
"""

from __future__ import annotations

import asyncio
import os
import sys

from bench.common.procs import free_port
from tests.wire_client import TOKEN, request


class Process:
    """`python -m semif_serve` on the stub scorer, with its stderr read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.port = proc, port
        self.stderr: list[str] = []

    @classmethod
    async def start(cls, without: tuple[str, ...] = (), **env: str) -> Process:
        """Started and listening, with `env` set and the names in `without` unset (the token among them)."""
        port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEMIF_")}
        environ.update(SEMIF_API_TOKEN=TOKEN, SEMIF_SCORER="stub", SEMIF_PORT=str(port), **env)
        for name in without:
            del environ[name]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "semif_serve", env=environ, stderr=asyncio.subprocess.PIPE
        )
        process = cls(proc, port)
        await asyncio.wait_for(process.wait_for_line("listening"), 30)
        return process

    async def wait_for_line(self, fragment: str) -> str:
        assert self.proc.stderr is not None
        while line := (await self.proc.stderr.readline()).decode():
            self.stderr.append(line)
            if fragment in line:
                return line
        raise AssertionError(
            f"the server exited without logging {fragment!r}: {''.join(self.stderr)}"
        )

    async def exit_code(self, timeout: float) -> int:
        assert self.proc.stderr is not None
        self.stderr += (
            (await asyncio.wait_for(self.proc.stderr.read(), timeout)).decode().splitlines(True)
        )
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def in_flight(self) -> None:
        """Until /health reports one POST in progress (the stub sleeps inside its call)."""
        while (await request(self.port, "GET", "/health", headers=[])).json["in_progress"] != 1:
            await asyncio.sleep(0.02)
