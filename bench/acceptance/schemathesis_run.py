"""Fuzz a live server against its OpenAPI document (semif_serve/openapi.json) with schemathesis.

Every operation gets positive cases (valid by the document) and, where it takes a
body, negative ones (invalid by it). Every response must match the document
(status, content type, headers, schema), none may be a 5xx, a body the document
rejects must be refused, and a POST without the token must be refused.

    python -m bench schemathesis                       # starts the stub itself
    python -m bench schemathesis --url http://127.0.0.1:8000 --max-examples 500

With --url the token is read from SEMIF_API_TOKEN. Exit status 1 on any finding.
Not checked: that every body the document accepts scores 200. Some rules are beyond
JSON Schema (unique option ids, "all" only up to 4 options, the '#o<k>' ids
reserved for orderings, the expanded-row cap, known workloads, the token limit), and
the server answers them 422, a documented status.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.generation import GenerationMode

from bench.common import procs
from bench.common.loadgen import Target
from bench.common.report import machine, write_json

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
    checks.ignored_auth,
]


def document() -> dict[str, Any]:
    """The OpenAPI document as the package ships it."""
    return json.loads(
        resources.files("semif_serve").joinpath("openapi.json").read_text(encoding="utf-8")
    )


def fuzz(url: str, token: str, max_examples: int) -> tuple[int, list[str]]:
    """Run every operation's cases against `url`; (cases sent, distinct findings)."""
    schema = schemathesis.openapi.from_dict(document())
    findings: dict[str, str] = {}
    sent = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if operation.body else [])
        for mode in modes:

            @settings(
                max_examples=max_examples,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def send(case: schemathesis.Case) -> None:
                nonlocal sent
                sent += 1
                response = case.call(
                    base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
                )
                try:
                    case.validate_response(
                        response, checks=CHECKS, headers={"Authorization": f"Bearer {token}"}
                    )
                except (Failure, FailureGroup) as error:
                    for failure in error.exceptions if isinstance(error, FailureGroup) else [error]:
                        key = f"{operation.label} [{mode.value}] {failure.title}"  # noqa: B023 - send() runs within this iteration
                        findings.setdefault(
                            key,
                            f"{key}: {failure.message[:1000]}\n  reproduce: {case.as_curl_command()[:1000]}",
                        )

            send()
    return sent, list(findings.values())


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench schemathesis", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--url", help="a running server (loopback only); default: start the stub scorer here"
    )
    parser.add_argument(
        "--max-examples", type=int, default=200, help="cases per operation and mode (default 200)"
    )
    parser.add_argument("--out", type=Path, help="write the outcome as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.url:
        target = Target.from_url(args.url)
        sent, findings = fuzz(target.url, target.token, args.max_examples)
    else:
        token = procs.token()
        with procs.semif_serve(procs.stub_env(), token) as server:
            sent, findings = fuzz(server.url, token, args.max_examples)
    print("\n".join(findings))
    print(
        f"{'PASS' if not findings else 'FAIL'} schemathesis: {sent} cases, {len(findings)} finding(s)"
    )
    if args.out is not None:
        write_json(
            args.out,
            {
                "check": "schemathesis",
                "passed": not findings,
                "cases": sent,
                "findings": findings,
                "machine": machine(),
            },
        )
    return 0 if not findings else 1
