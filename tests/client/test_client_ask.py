"""`semif-serve ask` against a live stub server, and what the client package may import.

One test runs the real entry point in a child process (`python -m semif_serve ask`);
the others call `ask.main` in a worker thread, so this test's event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

import pytest

from bench.common.procs import free_port
from semif_serve.client import ask
from semif_serve.decisions.calibration_file import FittedPrior, Table
from semif_serve.engine.stub import StubScorer
from tests.fakes import settings as server_settings
from tests.timing import timeless
from tests.wire_client import TOKEN, request

STATE = '{"ticket": "printer on fire"}'
ARGS = [
    "--state",
    STATE,
    "--question",
    "Is this urgent?",
    "--option",
    "yes=Yes, urgent",
    "--option",
    "no=No",
]
ROW = {
    "id": "ask",
    "state": {"ticket": "printer on fire"},
    "question": "Is this urgent?",
    "options": [{"id": "yes", "description": "Yes, urgent"}, {"id": "no", "description": "No"}],
}


@pytest.fixture
async def live(start_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SEMIF_API_TOKEN", TOKEN)
    return await start_server(
        StubScorer(server_settings()),
        calibration=Table({"triage": {"none": 1.5, "rotations": 2.5}}),
    )


async def run_ask(server: Any, *extra: str) -> int:
    return await asyncio.to_thread(
        ask.main, ["--url", f"http://127.0.0.1:{server.port}", *ARGS, *extra]
    )


def columns(out: str) -> dict[str, list[str]]:
    """The table's rows by option id (split on runs of two or more spaces)."""
    lines = out.strip().splitlines()
    assert re.split(r"\s{2,}", lines[0]) == [
        "option",
        "probability",
        "calibrated",
        "combined",
        "agreement",
    ]
    return {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line) for line in lines[1:])}


async def test_the_table_shows_the_servers_numbers(live, capsys) -> None:
    assert await run_ask(live, "--orderings", "rotations") == 0
    table = columns(capsys.readouterr().out)
    wire = (await request(live.port, "POST", "/decide", {**ROW, "orderings": "rotations"})).json
    combined, first = wire["combined"], wire["orderings"][0]
    assert list(table) == ["yes", "no"]
    for index, option_id in enumerate(["yes", "no"]):
        probability, calibrated, mean, agreement = table[option_id]
        assert probability == f"{first['probabilities'][index]:.4f}" and calibrated == "-"
        assert mean == f"{combined['probabilities'][index]:.4f}"
        assert agreement == (
            f"{combined['agreement']:.4f}" if combined["top"] == option_id else "-"
        )


async def test_the_prior_fills_the_combined_column_with_the_debiased_view(
    start_server, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("SEMIF_API_TOKEN", TOKEN)
    table = Table(
        priors={"triage": {2: FittedPrior((0.7, 0.3), 8)}}
    )  # no temperature for "prior": no calibrated view
    server = await start_server(StubScorer(server_settings()), calibration=table)
    assert await run_ask(server, "--orderings", "prior", "--workload", "triage") == 0
    printed = columns(capsys.readouterr().out)
    wire = (
        await request(
            server.port, "POST", "/decide", {**ROW, "orderings": "prior", "workload": "triage"}
        )
    ).json
    combined = wire["combined"]
    assert [row[2] for row in printed.values()] == [f"{p:.4f}" for p in combined["probabilities"]]
    assert [row[0] for row in printed.values()] == [
        f"{p:.4f}" for p in wire["orderings"][0]["probabilities"]
    ]
    assert [row[1] for row in printed.values()] == ["-", "-"] and printed[combined["top"]][
        3
    ] == "1.0000"


async def test_a_workload_fills_the_calibrated_column(live, capsys) -> None:
    assert await run_ask(live, "--workload", "triage") == 0
    table = columns(capsys.readouterr().out)
    wire = (await request(live.port, "POST", "/decide", {**ROW, "workload": "triage"})).json
    assert [row[1] for row in table.values()] == [
        f"{p:.4f}" for p in wire["calibrated"]["probabilities"]
    ]
    assert [row[2] for row in table.values()] == ["-", "-"]


async def test_an_averaged_decision_with_a_workload_fills_the_calibrated_column_from_the_combined_view(
    live, capsys
) -> None:
    """The server puts an averaged decision's calibration in combined.calibrated (no ordering carries one)."""
    assert await run_ask(live, "--orderings", "rotations", "--workload", "triage") == 0
    table = columns(capsys.readouterr().out)
    wire = (
        await request(
            live.port, "POST", "/decide", {**ROW, "orderings": "rotations", "workload": "triage"}
        )
    ).json
    calibrated = wire["combined"]["calibrated"]
    assert calibrated["method"] == "rotations" and calibrated["temperature"] == 2.5
    assert [row[1] for row in table.values()] == [f"{p:.4f}" for p in calibrated["probabilities"]]
    assert [row[2] for row in table.values()] == [
        f"{p:.4f}" for p in wire["combined"]["probabilities"]
    ]


async def test_json_prints_the_servers_answer(live, capsys) -> None:
    assert await run_ask(live, "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    assert timeless(printed) == timeless((await request(live.port, "POST", "/decide", ROW)).json)


async def test_a_plain_text_state_is_sent_as_a_string(live, capsys) -> None:
    argv = [
        "--url",
        f"http://127.0.0.1:{live.port}",
        "--json",
        "--state",
        "printer on fire",
        *ARGS[2:],
    ]
    assert await asyncio.to_thread(ask.main, argv) == 0
    printed = json.loads(capsys.readouterr().out)
    wire = (await request(live.port, "POST", "/decide", {**ROW, "state": "printer on fire"})).json
    assert printed["prompt_sha256"] == wire["prompt_sha256"]


def test_state_is_json_only_for_an_object_or_an_array() -> None:
    assert ask.state('{"a": 1}') == {"a": 1} and ask.state("[1, 2]") == [1, 2]
    for text in ("plain words", "42", '"quoted"', "null", "{not json"):
        assert ask.state(text) == text


async def test_a_refusal_prints_the_envelopes_message_and_exits_non_zero(live, capsys) -> None:
    assert await run_ask(live, "--workload", "nope") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        "unknown workload" in err
        and "'nope'" in err
        and "HTTP 422, invalid_request" in err
        and "request id" in err
    )


def test_without_a_token_it_exits_2(monkeypatch, capsys) -> None:
    monkeypatch.delenv("SEMIF_API_TOKEN", raising=False)
    assert ask.main(["--url", "http://127.0.0.1:9", *ARGS]) == 2
    assert "SEMIF_API_TOKEN" in capsys.readouterr().err


async def test_no_server_at_the_url_is_said_at_once_unless_told_to_wait(
    monkeypatch, capsys
) -> None:
    monkeypatch.setenv("SEMIF_API_TOKEN", TOKEN)
    where = f"http://127.0.0.1:{free_port()}"  # nothing listens: a connection there is refused
    began = time.monotonic()
    assert await asyncio.to_thread(ask.main, ["--url", where, *ARGS]) == 1
    assert time.monotonic() - began < 10.0  # ask's deadline is 30 s
    assert capsys.readouterr().err.startswith(
        f"semif-serve ask: cannot connect to {where}: is the server running? (connection_failed, "
    )
    waited = ["--url", where, "--wait-for-server", "--deadline", "0.5", *ARGS]
    assert await asyncio.to_thread(ask.main, waited) == 1
    err = capsys.readouterr().err
    assert "deadline_exceeded" in err and "is the server running?" in err


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--option", "maybe"], "ID=DESCRIPTION"),
        (["--deadline", "0"], "seconds > 0"),
        (["--deadline", "nan"], "seconds > 0"),
    ],
)
def test_a_bad_argument_is_a_usage_error(capsys, extra, said) -> None:
    with pytest.raises(SystemExit) as exited:
        ask.main([*ARGS, *extra])
    assert exited.value.code == 2 and said in capsys.readouterr().err


async def test_the_entry_point_runs_ask_in_a_child_process(live) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "semif_serve",
        "ask",
        "--url",
        f"http://127.0.0.1:{live.port}",
        *ARGS,
        env={**os.environ, "SEMIF_API_TOKEN": TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()
    assert list(columns(out.decode())) == ["yes", "no"]


def test_the_client_imports_neither_torch_nor_the_server() -> None:
    probe = (
        "import sys, semif_serve.client, semif_serve.client.ask; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers', 'fastjev', 'semif_serve'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(done.stdout.split())
    # The orderings methods' names are the one list the client offers: their module is pure.
    names = {"semif_serve", "semif_serve.decisions", "semif_serve.decisions.methods"}
    assert loaded and all(m in names or m.startswith("semif_serve.client") for m in loaded), loaded
