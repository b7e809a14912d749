"""deploy/nginx's renderer, without nginx: every placeholder filled, each replica a primary
and a never-down backup, retries bounded by the replica count, limits from the settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.nginx.render import Edge, render
from semif_serve.config import Settings

REPLICAS = ("127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003")


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
    keepalive = int(text.split("keepalive_timeout ", 1)[1].split("s;", 1)[0])  # the upstream one comes first
    assert keepalive < defaults.idle_timeout


def test_an_unknown_placeholder_or_no_replica_is_refused() -> None:
    with pytest.raises(KeyError):
        render(Edge("127.0.0.1:8000", REPLICAS, Path("/run/x")), template="listen {{lisen}};")
    with pytest.raises(ValueError):
        Edge("127.0.0.1:8000", (), Path("/run/x"))
