"""`semif-serve ask`: one decision from the terminal, through `Client`, shown as a table or raw JSON.

Rules: this module parses the command line, calls `Client.decide` once and renders
what came back; it decides nothing the client or the server decides. The token comes
only from SEMIF_API_TOKEN (never a flag: a flag would sit in shell history and `ps`).

`--state` is read as JSON when the text parses to a JSON object or array, and as a
plain string otherwise: `--state '{"ticket": "printer on fire"}'` sends an object,
`--state 'printer on fire'` a string (and so does `--state 42` or `--state '"x"'`,
whose JSON is neither an object nor an array: the text itself is sent).

Exit status: 0 answered; 1 the call failed (a refusal prints the envelope's message,
code, status and request id on stderr; no server at `--url` says so at once, unless
`--wait-for-server`); 2 bad usage or no token.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ..decisions.methods import ORDERINGS
from .clients import TOKEN_ENV, Client
from .errors import MissingToken, SemifError
from .results import Averaged, Decided
from .retry import RetryPolicy

DEFAULT_URL = "http://127.0.0.1:8000"
EXIT_FAILED = 1
EXIT_USAGE = 2


def state(text: str) -> Any:
    """A JSON object or array when the text is one, else the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (dict, list)) else text


def option(text: str) -> tuple[str, str]:
    """`id=description`, split at the first `=`."""
    option_id, sep, description = text.partition("=")
    if not sep or not option_id:
        raise argparse.ArgumentTypeError(f"expected ID=DESCRIPTION, got {text!r}")
    return option_id, description


def seconds(text: str) -> float:
    """A deadline: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="semif-serve ask",
        description="Ask semif-serve one typed decision. "
        f"The bearer token is read from {TOKEN_ENV}.",
    )
    parse.add_argument("--url", default=DEFAULT_URL, help=f"the server (default {DEFAULT_URL})")
    parse.add_argument(
        "--state",
        required=True,
        type=state,
        help="a JSON object or array, or else plain text sent as a string",
    )
    parse.add_argument("--question", required=True)
    parse.add_argument(
        "--option",
        dest="options",
        action="append",
        type=option,
        required=True,
        metavar="ID=DESCRIPTION",
        help="one option; repeat for each (2..16)",
    )
    parse.add_argument(
        "--orderings",
        choices=ORDERINGS,
        help="order averaging; prior: one row debiased by the workload's position prior; "
        "adaptive: that row, its half turn where its answer is unsure, and every rotation "
        "where the two disagree",
    )
    parse.add_argument("--workload", help="a calibrated workload the server knows")
    parse.add_argument("--id", default="ask", help="the decision id (default: ask)")
    parse.add_argument(
        "--deadline", type=seconds, default=30.0, help="seconds for the call, retries included"
    )
    parse.add_argument(
        "--wait-for-server",
        action="store_true",
        help="retry a refused connection until the deadline (a server still starting), "
        "instead of failing at once",
    )
    parse.add_argument(
        "--json", action="store_true", help="print the server's JSON instead of a table"
    )
    return parse


def table(result: Decided) -> str:
    """option, probability, calibrated, combined, agreement: one row per option, the caller's order.

    `probability` is SemIf's native one; for an averaged decision it is the first
    ordering's, which is the caller's order. `calibrated` is where the server puts it:
    on a plain result, and on the combined view of an averaged one (its orderings carry
    none). `agreement` is the decision's, on the row of the combined top option.
    """
    plain = result.orderings[0] if isinstance(result, Averaged) else result
    combined = result.combined if isinstance(result, Averaged) else None
    calibrated = combined.calibrated if combined is not None else plain.calibrated
    rows = [("option", "probability", "calibrated", "combined", "agreement")]
    for index, option_id in enumerate(result.option_ids):
        rows.append(
            (
                option_id,
                _number(plain.probability(option_id)),
                _number(calibrated.probabilities[index]) if calibrated else "-",
                _number(combined.probabilities[index]) if combined else "-",
                _number(combined.agreement) if combined and combined.top == option_id else "-",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows
    )


def _number(value: float) -> str:
    return f"{value:.4f}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    policy = RetryPolicy(deadline=args.deadline, wait_for_server=args.wait_for_server)
    try:
        with Client(args.url, retry=policy) as client:
            result = client.decide(
                args.state,
                args.question,
                args.options,
                id=args.id,
                orderings=args.orderings,
                workload=args.workload,
            )
    except MissingToken:
        print(f"semif-serve ask: set {TOKEN_ENV} to the server's bearer token", file=sys.stderr)
        return EXIT_USAGE
    except SemifError as error:
        status = f"HTTP {error.status}, " if error.status is not None else ""
        print(
            f"semif-serve ask: {error.message} ({status}{error.code}, request id {error.request_id})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(json.dumps(result.to_json(), indent=2) if args.json else table(result))
    return 0
