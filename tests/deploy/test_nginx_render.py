"""deploy/nginx's renderer, without nginx: every placeholder filled, each replica a primary
and a never-down backup, retries bounded by the replica count, limits from the settings,
and every body the edge answers itself in the envelope semif_serve/errors.py renders."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deploy.nginx.render import Edge, render
from semif_serve.config import Settings
from semif_serve.errors import CODES

REPLICAS = ("127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003")
RETURN = re.compile(r"return (\d{3}) '(.*)';")


def test_each_replica_is_a_primary_and_a_backup() -> None:
    text = render(Edge("127.0.0.1:8000", REPLICAS, Path("/run/x")))
    for replica in REPLICAS:
        assert f"server {replica} max_fails=1 fail_timeout=1s;" in text
        assert f"server {replica} backup max_fails=0;" in text
    assert text.count("proxy_next_upstream_tries 3;") == 2 and "{{" not in text


def test_limits_follow_the_servers_defaults() -> None:
    text = render(Edge("127.0.0.1:8000", REPLICAS[:1], Path("/run/x")))
    defaults = Settings(api_token="x" * 32)
    assert f"client_max_body_size {defaults.max_body_bytes};" in text
    assert f"client_header_timeout {defaults.header_timeout:g}s;" in text
    assert f"client_body_timeout {defaults.body_timeout:g}s;" in text
    keepalive = int(
        text.split("keepalive_timeout ", 1)[1].split("s;", 1)[0]
    )  # the upstream one comes first
    assert keepalive < defaults.idle_timeout


def test_an_unknown_placeholder_or_no_replica_is_refused() -> None:
    with pytest.raises(KeyError):
        render(Edge("127.0.0.1:8000", REPLICAS, Path("/run/x")), template="listen {{lisen}};")
    with pytest.raises(ValueError):
        Edge("127.0.0.1:8000", (), Path("/run/x"))


def test_every_body_the_edge_answers_itself_carries_the_type_errors_py_gives_it() -> None:
    """CODES' status and type for a code it has; for the edge's own code, the one type CODES gives its status."""
    bodies = RETURN.findall(render(Edge("127.0.0.1:8000", REPLICAS, Path("/run/x"))))
    assert len(bodies) == 3  # /metrics 404, 413, 503 no_replica
    for status, text in bodies:
        error = json.loads(text)["error"]
        assert set(error) == {"code", "message", "type"} and error["message"]
        if error["code"] in CODES:
            assert CODES[error["code"]] == (int(status), error["type"]), text
        else:
            assert {kind for code_status, kind in CODES.values() if code_status == int(status)} == {
                error["type"]
            }, text
