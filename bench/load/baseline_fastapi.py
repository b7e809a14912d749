"""Bench-only baseline: the same endpoints on FastAPI + uvicorn, over the same stub.

Run as one worker: `uvicorn bench.load.baseline_fastapi:app` (the load benchmark
starts it through bench.common.procs). It is never imported by the product.

To make the comparison about the HTTP stack alone, everything behind the
routing is the product's own code: settings from the same environment, the
same `StubScorer` on the same single engine thread (`Engine`), the same
`Service` for auth, admission, parsing and the JSON it renders. What differs is
exactly what the benchmark compares: uvicorn's HTTP/1.1 loop and FastAPI's
routing and Request/Response objects, against our h11 connection loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response

from semif_serve import config
from semif_serve.engine.stub import StubScorer
from semif_serve.engine.worker import Engine
from semif_serve.errors import ApiError
from semif_serve.http.exchange import Reply
from semif_serve.service.head_policy import ROUTES, Service

settings = config.load()
if settings.scorer != "stub":
    raise ValueError("the FastAPI baseline serves SEMIF_SCORER=stub only")
engine = Engine(StubScorer(settings))
service = Service(settings, engine)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    await engine.start()
    yield
    engine.close()


app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)


def _response(reply: Reply) -> Response:
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in reply.headers}
    return Response(
        content=reply.body, status_code=reply.status, media_type="application/json", headers=headers
    )


async def _post(path: bytes, request: Request) -> Response:
    """Auth, then an admission slot before the body is read, as our wire layer does."""
    try:
        caller = service.authorize(request.headers.get("authorization", "").encode("latin-1"))
        service.admission.enter(caller)
    except ApiError as error:
        return _response(Reply.error(error))
    try:
        return _response(await service.post(ROUTES[path], await request.body()))
    finally:
        service.admission.leave(caller)


@app.get("/health")
async def health() -> Response:
    return _response(service.health())


@app.post("/decide")
async def decide(request: Request) -> Response:
    return await _post(b"/decide", request)


@app.post("/decide/shared")
async def decide_shared(request: Request) -> Response:
    return await _post(b"/decide/shared", request)
