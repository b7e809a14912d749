"""The body pipeline: what a POST's body goes through once its head was admitted, step by step, no I/O.

Rule 1: six steps, in this order, each called in turn by `Pipeline.run` and written below it in
that order: `read` (the body as a
request, under the one calibration current at the read), `expand` (the request's rows and its first
engine call, direct or shared), `within_budget` (with SEMIF_MAX_WAIT_S, the wait estimate admits
the request at its worst case, every row it may score, or refuses it 429 before it joins the
queue), `score` (the engine call; *extension:* where orderings "adaptive" decisions escalate, later
calls over their half turn and then the rest, service/escalation.py, each call through `score`), the view
(decisions/viewing.py: SemIf's scores with the views beside them), `render` (the route's response
and headers). A step refuses by raising ApiError; `run` makes that the reply, and no
later step runs, so a refused body never reaches the scorer.
Rule 2: a POST route declares its read step (a `Reader`, in service/head_policy.py's ROUTES); the
`Read` it returns is all the later steps need: a System One body's carries its plan, which `render`
answers from.
Rule 3: the scorer's failures (engine/scorer.py) become envelopes in one place, `Pipeline.score`; a
bug in read, view or render is a 500 in the envelope (C3), never a dropped connection.

Scores pass through untouched (INV-1): the only things added are `calibrated` and the
order-averaged `combined` view (under orderings "prior", the debiased one; under "adaptive",
extension, that or, where every rotation was scored in later engine calls, the rotations').

*Extension:* once the reply's body is built, its decisions are offered for audit (service/audits.py),
which may queue some for idle capacity and never changes or delays the reply.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..decisions import calibration_file, request_model, viewing
from ..decisions.request_model import DecideRequest
from ..decisions.views import View, as_json
from ..engine.scorer import OutOfMemory, ScoringFailed
from ..engine.worker import CallTiming, Engine
from ..errors import ApiError, excerpt
from ..http.exchange import Reply, Route, retry_after
from ..systemone import assemble, translate
from . import escalation
from .audits import Auditor
from .escalation import Calls
from .loaded_calibration import LoadedCalibration
from .wait_budget import OverBudget, WaitBudget

log = logging.getLogger("semif_serve.service")
# A response body, and the headers of the route's own that go with it.
Built = tuple[Any, tuple[tuple[bytes, bytes], ...]]


def json_bytes(payload: Any) -> bytes:
    """A response body as JSON. allow_nan=False: a non-finite number would be invalid JSON on the wire."""
    return json.dumps(payload, allow_nan=False, ensure_ascii=False).encode()


@dataclass(frozen=True)
class Read:
    """A body read under one calibration: its request, the table its views use, and for System One
    the plan its answers follow (None: a /decide body)."""

    request: DecideRequest
    table: calibration_file.Table
    plan: translate.Plan | None = None


# A POST route's read step: its body, under the calibration current at the read, as a request.
Reader = Callable[[LoadedCalibration, bytes], Read]


def read_decide(current: LoadedCalibration, body: bytes) -> Read:
    """POST /decide: one decision."""
    return Read(request_model.parse_decide(body, current.limits), current.table)


def read_shared(current: LoadedCalibration, body: bytes) -> Read:
    """POST /decide/shared: several decisions over one shared state."""
    return Read(request_model.parse_shared(body, current.limits), current.table)


def read_systemone(current: LoadedCalibration, body: bytes) -> Read:
    """POST /v1/systemone (extension): System One's questions, translated to the request model."""
    plan = translate.translate(body, current.policy)
    return Read(plan.request, current.table, plan)


class Scored(NamedTuple):
    """What one engine call gives back: SemIf's results, and SemIf's own timing dict (None for a direct call)."""

    results: list[dict[str, Any]]
    semif_timing: dict[str, Any] | None


class Pipeline:
    """The body pipeline over one engine: `run` calls the steps in order."""

    def __init__(
        self,
        engine: Engine,
        budget: WaitBudget | None,
        served_model: str,
        backend: str,
        audits: Auditor | None = None,
    ) -> None:
        """`budget`: SEMIF_MAX_WAIT_S's, built by the server beside admission (None: by count alone);
        `served_model` and `backend`: how System One's answers name the weights and their backend;
        `audits`: where answered decisions are offered for audit (None: never)."""
        self.engine = engine
        self.budget = budget
        self.served_model = served_model
        self.backend = backend
        self.audits = audits

    async def run(
        self,
        reader: Reader,
        current: LoadedCalibration,
        body: bytes,
        caller: str = "-",
        route: Route | None = None,
    ) -> Reply:
        """A POST body through every step, its engine calls in `caller`'s turn; the first refusal is
        the reply. Every reply is built with `route` (ops' label) where it is made: never copied to
        add it, which would cost a dozen calls on every request."""
        call = None
        try:
            read = self.read(reader, current, body)
            call, rows = self.expand(read.request)
            calls = await self.within_budget(read, rows, call, caller)
        except ApiError as error:
            return Reply.error(error, call, route=route)
        try:
            results = calls.results()
            views = viewing.views(read.request, results, read.table, calls.escalated)
            payload, headers = self.render(read, calls, views, call.kind)
            body = json_bytes(payload)
            # After this step: the reply goes out first, as built. Audits off: nothing is scheduled.
            if self.audits is not None and self.audits.on:
                loop = asyncio.get_running_loop()
                loop.call_soon(
                    self.audits.offer, read.request, results, read.table, calls.escalated
                )
            return Reply(
                200,
                body,
                headers,
                timing=escalation.timing(call, calls),
                decision_methods=tuple(decision.method for decision in read.request.decisions),
                escalations=(read.request.workload or "-",) * len(calls.escalated),
                route=route,
            )
        except Exception:  # noqa: BLE001 - any failure here must still be the envelope (C3)
            log.exception("failed to build a response from a scorer result")
            return Reply.error(
                ApiError("scoring_failed", "failed to build the response"), call, route=route
            )

    @staticmethod
    def read(reader: Reader, current: LoadedCalibration, body: bytes) -> Read:
        """Step 1: the body as a request under `current`, the one calibration of this request (a
        reload meanwhile never mixes two). A reader's own bug is a 500 in the envelope (C3)."""
        try:
            return reader(current, body)
        except ApiError:
            raise
        except Exception:  # noqa: BLE001 - only parsing is in here: the scorer's failures have their own table
            log.exception("failed to read a request body")
            raise ApiError("scoring_failed", "failed to read the request") from None

    @staticmethod
    def expand(request: DecideRequest) -> tuple[CallTiming, list[dict[str, Any]]]:
        """Step 2: the rows a request scores and the engine call it makes (request_model: direct
        or shared); *extension:* for orderings "adaptive", its first call."""
        rows = request.rows()
        return CallTiming(request.kind, len(rows)), rows

    async def within_budget(
        self, read: Read, rows: list[dict[str, Any]], call: CallTiming, caller: str
    ) -> Calls:
        """Step 3: the engine calls (step 4) in `caller`'s turn, once the wait budget (if any) admits the
        request at its worst case (every row it may score, `row_count`, counted ahead of its first call):
        refused, it never joins the queue."""
        score = functools.partial(self.score, caller=caller)
        if self.budget is None:
            return await escalation.calls(read.request, read.table, rows, call, score)
        try:
            admitted = self.budget.admit(call.kind, read.request.row_count, caller)
        except OverBudget as over:
            raise busy(over) from None
        try:
            return await escalation.calls(read.request, read.table, rows, call, score)
        finally:
            self.budget.estimator.leave(admitted, call.started)

    async def score(
        self,
        rows: list[dict[str, Any]],
        call: CallTiming,
        *,
        caller: str,
        follow_up: bool = False,
        reserve: int = 0,
    ) -> Scored:
        """Step 4: one engine call in `caller`'s turn, timed in `call`; its failures as envelopes. A
        request's first, and (extension) an adaptive one's later calls, its follow-ups: service/escalation.py
        makes them all through this. `reserve`: the rows its follow-ups may add (engine/worker.py)."""
        try:
            if call.kind == "direct":
                return Scored([await self.engine.score(rows[0], call, caller=caller)], None)
            return Scored(
                *await self.engine.score_shared(
                    rows, call, caller=caller, follow_up=follow_up, reserve=reserve
                )
            )
        except ValueError as error:
            raise ApiError(
                "invalid_request", excerpt(str(error), 300) or "the scorer refused the input"
            ) from None
        except OutOfMemory as error:
            raise ApiError("out_of_memory", str(error) or "CUDA out of memory") from None
        except ScoringFailed as error:
            raise ApiError("scoring_failed", excerpt(str(error), 300) or "scoring failed") from None
        except Exception:  # noqa: BLE001 - an unknown scorer failure is a 500 in the envelope
            log.exception("scorer call failed")
            raise ApiError("scoring_failed", "scoring failed") from None

    def render(self, read: Read, calls: Calls, views: list[View], kind: str) -> Built:
        """Step 6: a /decide or /decide/shared response from the views; a System One one from the same
        views, with SemIf's server's headers: the engine call made (direct or shared) and its backend."""
        if read.plan is None:
            return decide_json(read.request, views, calls.timing), ()
        body = assemble.response(
            read.plan,
            self.served_model,
            views,
            calls.first,
            kind,
            calls.timing,
            tuple((later.results, later.timing) for later in calls.follow_ups),
        )
        return body, ((b"x-semif-mode", kind.encode()), (b"x-semif-backend", self.backend.encode()))

    def scorer_call(self, call: CallTiming) -> None:
        """A scorer call ended (on the loop, after the window of recent calls measured it): one kind's
        successful calls coming to take longer than the whole wait budget is logged once per crossing."""
        if call.outcome != "ok" or call.scoring is None or self.budget is None:
            return
        if self.budget.crossed(call.kind):
            log.warning(
                "a %s scorer call now takes %.2f s (recent mean), over the SEMIF_MAX_WAIT_S budget of "
                "%g s: any request behind one such call is refused busy; raise SEMIF_MAX_WAIT_S",
                call.kind,
                self.budget.estimator.recent.per_call(call.kind),
                self.budget.seconds,
            )


def busy(over: OverBudget) -> ApiError:
    """The wait budget's refusal as 429 busy, Retry-After the drain of the rows ahead (1..60 s)."""
    return ApiError(
        "busy", str(over), ((b"retry-after", b"%d" % retry_after(over.estimate.seconds)),)
    )


def decide_json(
    request: DecideRequest, views: list[View], semif_timing: dict[str, Any] | None
) -> Any:
    """A /decide or /decide/shared response: the views, and for shared SemIf's own timing beside them."""
    shown = [as_json(view) for view in views]
    return {"results": shown, "timing": semif_timing} if request.shared else shown[0]
