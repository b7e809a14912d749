"""Replicas behind real nginx on loopback: spread, routing around full queues, a rolling
restart with no client-visible failure, and a SIGKILL mid-request saved by nginx's retry.

Each test runs the scenario `python -m bench scale` measures (bench/scale/scale.py), small:
three stub replicas (`python -m semif_serve`, SEMIF_SCORER=stub with a delay) started by
bench/common/procs.py, and nginx from deploy/nginx's template as an unprivileged child with
its own prefix and `daemon off`, stopped at the end. Without nginx these tests skip,
except under CI=true, where they fail: CI must install it (apt-get install nginx).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import procs
from bench.scale import edge, scale
from deploy.nginx.render import Edge, render
from semif_serve.errors import CODES, STATUS

TOKEN = "scale-token-" + "0123456789abcdef" * 2
QUEUE = 2


@pytest.fixture(scope="module", autouse=True)
def nginx_installed() -> None:
    if edge.nginx_binary() is None:
        message = "nginx is not installed (apt-get install nginx, or set SEMIF_NGINX)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replicas")


@pytest.fixture(scope="module")
def fast(log_dir: Path) -> Iterator[tuple[list[edge.Replica], edge.Nginx]]:
    """Three replicas of 10 ms per call behind one nginx."""
    with (
        edge.fleet(3, procs.stub_env(10, queue=8), TOKEN, log_dir) as replicas,
        edge.nginx(replicas, TOKEN) as front,
    ):
        yield replicas, front


@pytest.fixture(scope="module")
def slow(log_dir: Path) -> Iterator[tuple[list[edge.Replica], edge.Nginx]]:
    """Three replicas of 600 ms per call and SEMIF_MAX_QUEUE=2: queues that stay full."""
    with (
        edge.fleet(3, procs.stub_env(600, queue=QUEUE), TOKEN, log_dir) as replicas,
        edge.nginx(replicas, TOKEN) as front,
    ):
        yield replicas, front


def test_rendered_config_passes_nginx_test(tmp_path: Path) -> None:
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        render(Edge("127.0.0.1:1", ("127.0.0.1:2", "127.0.0.1:3"), tmp_path, workers="1"))
    )
    done = subprocess.run(
        [
            edge.nginx_binary() or "nginx",
            "-t",
            "-p",
            str(tmp_path),
            "-c",
            str(conf),
            "-e",
            "stderr",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "upstream" in conf.read_text() and "{{" not in conf.read_text()


def test_load_spreads_across_replicas(fast) -> None:
    replicas, front = fast
    result = scale.spread(replicas, front, concurrency=6, duration=1.5)
    assert (
        result["client_visible_failures"] == 0
        and result["unanswered"] == 0
        and result["mismatched"] == 0
    )
    # least_conn over equal replicas: each gets a fair share, none starved.
    assert min(result["per_replica"]) >= result["sent"] / 3 * 0.5, result


def test_request_id_is_passed_through_or_made_at_the_edge(fast) -> None:
    _, front = fast
    ledger = scale.run_async(scale.burst(front.target, "own-id", 3, via_edge=True))
    assert ledger.summary()["mismatched"] == 0 and ledger.statuses[200] == 3
    health = scale.run_async(scale.call(front.target, "GET", "/health"))
    assert health.status == 200 and health.json()["status"] == "ok"
    made = health.header("x-request-id")
    assert made is not None and len(made) == 32 and int(made, 16) >= 0


def test_with_two_queues_full_nginx_routes_to_the_third(slow) -> None:
    replicas, front = slow
    result = scale.full_queues(replicas, front, QUEUE)
    assert result["fillers"]["statuses"] == {"200": 2 * QUEUE}
    assert result["through_nginx"]["statuses"] == {"200": QUEUE}, result
    assert result["served_by_free_replica"] == QUEUE, result


def test_a_burst_behind_nginx_sees_fewer_429s_than_one_replica(slow) -> None:
    replicas, front = slow
    result = scale.burst_429s(replicas, front, offered=3 * QUEUE)
    assert result["direct_one_replica"]["statuses"] == {"200": QUEUE, "429": 2 * QUEUE}, result
    assert result["nginx"]["statuses"] == {"200": 3 * QUEUE}, result


def test_sigkill_mid_request_is_retried_on_another_replica(slow) -> None:
    replicas, front = slow
    # One call per replica, so the others have a free slot for what the victim was scoring
    # (with every queue full the retry is answered 429 instead: a refusal, not a loss).
    result = scale.kill_mid_request(replicas, front, per_replica=1, delay_s=0.6)
    assert result["in_progress_on_victim_at_kill"] == 1
    assert result["statuses"] == {"200": 3} and not result["errors"], result
    assert result["cut_on_victim_and_retried"] == 1 and result["retried_then_200"] == 1, result
    # The control: a caller talking to the replica directly loses what was in flight.
    direct = scale.kill_mid_request(replicas, None, per_replica=1, delay_s=0.6)
    assert direct["in_progress_on_victim_at_kill"] == 1
    assert sum(direct["errors"].values()) == 1 and not direct["statuses"], direct


def test_rolling_restart_loses_and_duplicates_nothing(fast) -> None:
    replicas, front = fast
    # Longer than the template's fail_timeout (1 s): nginx takes a restarted replica back
    # only after it, so the next one is stopped once it has.
    result = scale.rolling_restart(replicas, front, concurrency=6, pause=1.3)
    assert len(result["restarts"]) == 3
    assert result["sent"] > 100, result
    assert (
        result["unanswered"] == 0 and result["answered_twice"] == 0 and result["mismatched"] == 0
    ), result
    assert result["client_visible_failures"] == 0, result
    assert result["statuses"] == {"200": result["sent"]}
    assert result["retried_by_nginx"] >= 1  # the restarts were felt, and absorbed


def test_edge_errors_use_the_contract_envelope(log_dir: Path) -> None:
    """What nginx answers itself: 413 over SEMIF_MAX_BODY_BYTES (the server's code) and,
    with no replica listening, 503 `no_replica` (the edge's own code) - JSON envelopes."""
    with (
        edge.fleet(1, procs.stub_env(0), TOKEN, log_dir) as replicas,
        edge.nginx(replicas, TOKEN, max_body_bytes=4096) as front,
    ):
        exact = scale.run_async(scale.call(front.target, "POST", "/decide", b"x" * 4096))
        assert exact.status == 422  # at the limit: passed on, and the replica judged it
        large = scale.run_async(scale.call(front.target, "POST", "/decide", b"x" * 4097))
        assert large.status == 413 == STATUS[large.json()["error"]["code"]]
        assert large.json()["error"]["code"] == "request_too_large" and large.header("x-request-id")
        assert large.json()["error"]["type"] == CODES["request_too_large"][1]
        replicas[0].stop()
        gone = scale.run_async(scale.call(front.target, "POST", "/decide", b"{}"))
        assert gone.status == 503 and gone.json()["error"]["code"] == "no_replica", gone.body
        assert (
            gone.json()["error"]["type"] == CODES["shutting_down"][1]
        )  # retried like a draining replica's 503
        assert "no_replica" not in STATUS  # a caller can tell the edge answered, not a replica
