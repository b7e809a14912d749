"""Which route ops labels a response with: the route that answered, carried by the reply (and kept
by the connection for the wire's own refusals while a ticket's body is read), or, for a head refused
before any route was found, its target's path as routing reads it ("other" when no route is there).

In memory on the fake clock, against a real Server's service and ops; ops' `finish` is watched,
not replaced, to see which route each reply handed it. The label shows three ways: the metric's
`route`, the access log's `path`, and `x-typesafe-request-id`, which System One's routes add.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from semif_serve.http.exchange import Reply
from semif_serve.service.head_policy import ROUTES
from tests.http.memory import Memory
from tests.wire_client import Response, raw_request

SYSTEMONE = ROUTES[b"/v1/systemone"]
CHUNKED = b"transfer-encoding: chunked\r\ncontent-type: application/json\r\n"


def watch(memory: Memory) -> list[Reply]:
    """The replies ops' `finish` is handed from now on (it still records each as before)."""
    handed: list[Reply] = []
    finish = memory.server.ops.finish

    def watched(exchange: Any, reply: Reply, *rest: Any) -> None:
        handed.append(reply)
        finish(exchange, reply, *rest)

    memory.server.ops.finish = watched  # type: ignore[method-assign]  # a pass-through that records
    return handed


async def served(memory: Memory, head: bytes) -> tuple[Response, list[Reply]]:
    """The one response to `head` on a fresh connection, and the replies ops' `finish` was handed."""
    handed = watch(memory)
    wire = await memory.connect()
    await wire.channel.send(head)
    (response,) = wire.channel.responses()
    return response, handed


async def requests_by_route(memory: Memory) -> dict[tuple[str, str], float]:
    """semif_http_requests_total by (route, status), scraped over another in-memory connection."""
    wire = await memory.connect()
    await wire.channel.send(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
    (scrape,) = wire.channel.responses()
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(scrape.body.decode()):
        for found in family.samples:
            if found.name == "semif_http_requests_total":
                key = (found.labels["route"], found.labels["status"])
                counts[key] = counts.get(key, 0.0) + found.value
    return counts


def logged_paths(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.fields["path"] for record in caplog.records if record.name.endswith("access")]


async def test_a_body_the_wire_refuses_after_the_head_was_answered_keeps_the_answered_route(
    memory_server, fake, caplog
) -> None:
    """A chunked body past the limit is refused by the wire itself, after System One's route took
    the head: the reply carries that route, so its label, log path and SDK request-id field are
    the route's (the query string is in none of them)."""
    caplog.set_level(logging.INFO, "semif_serve.access")
    memory = await memory_server(metrics=True, max_body_bytes=10)
    chunks = b'b\r\n{"model": 1\r\n0\r\n\r\n'
    head = raw_request(target=b"/v1/systemone?trace=1", fields=CHUNKED, body=chunks)
    response, handed = await served(memory, head)
    assert (response.status, response.code) == (413, "request_too_large")
    assert [reply.route for reply in handed] == [SYSTEMONE]  # None with the route not kept
    assert response.headers[b"x-typesafe-request-id"] == response.headers[b"x-request-id"]
    assert logged_paths(caplog) == ["/v1/systemone"]
    assert (await requests_by_route(memory))[("/v1/systemone", "413")] == 1
    assert fake.calls == []


async def test_a_body_that_never_comes_keeps_the_answered_route_in_its_408(
    memory_server, caplog
) -> None:
    caplog.set_level(logging.INFO, "semif_serve.access")
    memory = await memory_server(metrics=True)
    wire = await memory.connect()
    handed = watch(memory)
    await wire.channel.send(raw_request(target=b"/v1/systemone", fields=CHUNKED))
    await memory.clock.advance(memory.server.settings.body_timeout + 0.1)
    (response,) = wire.channel.responses()
    assert (response.status, response.code) == (408, "request_timeout")
    assert [reply.route for reply in handed] == [SYSTEMONE]
    assert b"x-typesafe-request-id" in response.headers
    assert logged_paths(caplog) == ["/v1/systemone"]
    assert (await requests_by_route(memory))[("/v1/systemone", "408")] == 1


@pytest.mark.parametrize(
    ("head", "status", "label", "path"),
    [
        # The wire's own head checks, before the application is asked: labelled by the path.
        (
            raw_request(target=b"/v1/systemone", fields=b"content-length: 1\r\n" + CHUNKED),
            400,
            "/v1/systemone",
            "/v1/systemone",
        ),
        (
            raw_request(target=b"/v1/systemone?q", fields=b"x-big: " + b"v" * 16384 + b"\r\n"),
            431,
            "/v1/systemone",
            "/v1/systemone",
        ),
        # The application refused before finding a route: an authority Host contradicts, a wrong method.
        (
            raw_request(target=b"http://elsewhere/v1/systemone"),
            400,
            "/v1/systemone",
            "/v1/systemone",
        ),
        (
            raw_request(method=b"GET", target=b"/v1/systemone"),
            405,
            "/v1/systemone",
            "/v1/systemone",
        ),
        # No route at that path: "other", never the raw path, which only the log shows.
        (raw_request(target=b"/nowhere?secret=1"), 404, "other", "/nowhere"),
    ],
    ids=["both framings", "head over 16 KiB", "authority not Host", "wrong method", "unknown path"],
)
async def test_a_head_refused_before_any_route_is_labelled_by_its_target(
    memory_server, caplog, head, status, label, path
) -> None:
    caplog.set_level(logging.INFO, "semif_serve.access")
    memory = await memory_server(metrics=True)
    response, handed = await served(memory, head)
    assert response.status == status
    assert [reply.route for reply in handed] == [None]
    # System One's SDK field: on its route's path, and on every 404.
    assert (b"x-typesafe-request-id" in response.headers) == (label != "other" or status == 404)
    assert logged_paths(caplog) == [path]
    assert (await requests_by_route(memory))[(label, str(status))] == 1
