"""Bench-only: run semif-serve under cProfile and write the stats when it exits.

`python -m bench.load.profiled_server OUT.prof` serves exactly as `semif-serve` does. The
server leaves through os._exit (a scorer call past the shutdown grace must not keep
the process alive), which skips cProfile's own exit hook, so the stats are written
just before that exit. Only the event-loop thread is profiled, as with `-m cProfile`.
"""

from __future__ import annotations

import cProfile
import os
import sys


def main(path: str) -> int:
    profiler = cProfile.Profile()
    real_exit = os._exit

    def dump_then_exit(code: int) -> None:
        profiler.disable()
        profiler.dump_stats(path)
        real_exit(code)

    os._exit = dump_then_exit  # type: ignore[assignment]
    from semif_serve.cli import main as serve

    profiler.enable()
    code = serve([])
    profiler.disable()
    profiler.dump_stats(path)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
