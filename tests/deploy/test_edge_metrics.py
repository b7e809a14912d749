"""The nginx edge never serves /metrics: it answers 404 in the contract's envelope itself,
while the replica behind it serves /metrics directly (deploy/prometheus scrapes it there).

One stub replica behind nginx rendered from deploy/nginx's template, both real, on
loopback. Without nginx this skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from bench.common import procs
from bench.scale import edge
from semif_serve.errors import CODES

TOKEN = "edge-metrics-token-" + "0123456789abcdef" * 2


def test_the_edge_refuses_metrics_and_the_replica_serves_them(tmp_path: Path) -> None:
    if edge.nginx_binary() is None:
        message = "nginx is not installed (apt-get install nginx, or set SEMIF_NGINX)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with (
        edge.fleet(1, {**procs.stub_env(0), "SEMIF_METRICS": "on"}, TOKEN, tmp_path) as replicas,
        edge.nginx(replicas, TOKEN) as front,
    ):
        (replica,) = replicas
        through = httpx.get(f"http://{front.target.host}:{front.target.port}/metrics", timeout=10.0)
        assert through.status_code == 404 and through.json()["error"]["code"] == "not_found"
        assert through.json()["error"]["type"] == CODES["not_found"][1]
        assert through.headers["x-request-id"]
        assert "semif_" not in through.text
        direct = httpx.get(f"http://{replica.address}/metrics", timeout=10.0)
        assert direct.status_code == 200 and "semif_http_requests_total" in direct.text
        health = httpx.get(f"http://{front.target.host}:{front.target.port}/health", timeout=10.0)
        assert health.status_code == 200  # the rest of the edge still proxies
