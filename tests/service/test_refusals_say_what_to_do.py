"""On a real socket, the refusals a newcomer meets say what to do: a wrong path's 404 lists the
endpoints there are, a 413 names the setting that raises the limit (whether the body declared
its length or came chunked). The 401's challenge is test_bearer.py's; the token's rule at
startup is test_entry_point.py's; the client's own refusals are tests/client's."""

from __future__ import annotations

from tests.request_bodies import BODY
from tests.wire_client import AUTH, AUTH_LINE, parse_responses, raw_responses, request

ENDPOINTS = (
    "GET /health, POST /decide, POST /decide/shared, GET /metrics, POST /v1/systemone, "
    "GET /v1/models, GET /v1/audit, GET /healthz"
)


async def test_a_wrong_path_lists_the_endpoints(start_server, fake) -> None:
    server = await start_server(fake)
    for path in ("/decision", "/v1/decide"):
        response = await request(server.port, "POST", path, BODY, [AUTH])
        assert (response.status, response.code) == (404, "not_found")
        assert (
            response.json["error"]["message"]
            == f"no endpoint at {path}; the endpoints: {ENDPOINTS}"
        )
    assert fake.calls == []


async def test_a_body_over_the_limit_names_the_setting_declared_or_chunked(
    start_server, fake
) -> None:
    server = await start_server(fake, max_body_bytes=64)
    declared = await request(server.port, "POST", "/decide", b"x" * 65, [AUTH])
    chunk = b"x" * 65
    (chunked,) = parse_responses(
        (
            await raw_responses(
                server.port,
                b"POST /decide HTTP/1.1\r\nhost: x\r\n"
                + AUTH_LINE
                + b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                + b"%x\r\n" % len(chunk)
                + chunk
                + b"\r\n0\r\n\r\n",
                1,
            )
        ).data
    )
    raise_it = "64-byte limit; the server's SEMIF_MAX_BODY_BYTES raises it"
    assert (declared.status, declared.json["error"]["message"]) == (
        413,
        f"declared body over the {raise_it}",
    )
    assert (chunked.status, chunked.json["error"]["message"]) == (413, f"body over the {raise_it}")
    assert fake.calls == []
