"""The connection's phase table, tested as a table: every step from every phase, allowed or refused.

The expected edges are written out here independently of http/phases.py, so a step added
to or dropped from the table fails one named case.
"""

from __future__ import annotations

import itertools

import pytest

from semif_serve.http.connection import HEAD_READERS, LATE, HttpConnection
from semif_serve.http.phases import (
    IN_PROGRESS,
    REPLIED,
    STILL_SENDING,
    UNASKED,
    IllegalStep,
    Phase,
    Step,
    after,
)

P, S = Phase, Step
ALLOWED = {
    (P.OPENED, S.ARRIVED): P.BUFFERED,  # the channel reports bytes before the task reads them
    (P.OPENED, S.REPLY): P.REFUSING,
    (P.OPENED, S.CLOSE): P.CLOSING,
    (P.WAITING, S.ARRIVED): P.BUFFERED,
    (P.WAITING, S.REPLY): P.REFUSING,  # a 408 for a head never begun is not sent, but a 503 cap is
    (P.WAITING, S.CLOSE): P.CLOSING,
    (P.BUFFERED, S.BEGUN): P.HEAD,  # the wire reads the bytes the channel reported
    (P.BUFFERED, S.REPLY): P.REFUSING,  # shutdown's 503 to a head that arrived as the task slept
    (P.BUFFERED, S.CLOSE): P.CLOSING,
    (P.HEAD, S.NO_BODY): P.HEARD,
    (P.HEAD, S.TAKEN): P.BODY,
    (P.HEAD, S.REPLY): P.REFUSING,
    (P.HEAD, S.CLOSE): P.CLOSING,
    (P.HEARD, S.READ): P.SCORING,
    (P.HEARD, S.REPLY): P.ANSWERING,
    (P.HEARD, S.CLOSE): P.CLOSING,
    (P.BODY, S.READ): P.SCORING,
    (P.BODY, S.REPLY): P.REFUSING,
    (P.BODY, S.CLOSE): P.CLOSING,
    (P.SCORING, S.REPLY): P.ANSWERING,
    (P.SCORING, S.CLOSE): P.CLOSING,
    (P.ANSWERING, S.IDLE): P.WAITING,
    (P.ANSWERING, S.BEGUN): P.HEAD,  # pipelined: the next head arrived with this one
    (P.ANSWERING, S.CLOSE): P.CLOSING,
    (P.REFUSING, S.CLOSE): P.CLOSING,
}
PHASES = [
    P.OPENED,
    P.WAITING,
    P.BUFFERED,
    P.HEAD,
    P.HEARD,
    P.BODY,
    P.SCORING,
    P.ANSWERING,
    P.REFUSING,
    P.CLOSING,
]
STEPS = [S.ARRIVED, S.BEGUN, S.NO_BODY, S.TAKEN, S.READ, S.REPLY, S.IDLE, S.CLOSE]
REFUSED = [pair for pair in itertools.product(PHASES, STEPS) if pair not in ALLOWED]


def test_the_lists_name_every_phase_and_step() -> None:
    assert {p.name for p in PHASES} == set(Phase.__annotations__)
    assert {s.name for s in STEPS} == set(Step.__annotations__)
    assert len(ALLOWED) + len(REFUSED) == len(PHASES) * len(STEPS)


@pytest.mark.parametrize(("phase", "step"), list(ALLOWED), ids=repr)
def test_an_allowed_step_leads_to_its_phase(phase: Phase, step: Step) -> None:
    assert after(phase, step) is ALLOWED[phase, step]


@pytest.mark.parametrize(("phase", "step"), REFUSED, ids=repr)
def test_a_step_the_table_does_not_list_raises(phase: Phase, step: Step) -> None:
    with pytest.raises(IllegalStep, match=f"{phase.name} has no step {step.name}"):
        after(phase, step)


def test_a_reply_refuses_exactly_where_the_request_is_not_read_whole() -> None:
    replying = {phase: after(phase, S.REPLY) for phase in PHASES if (phase, S.REPLY) in ALLOWED}
    assert {p for p, then in replying.items() if then is P.ANSWERING} == {P.HEARD, P.SCORING}
    refusing = {P.OPENED, P.WAITING, P.BUFFERED, P.HEAD, P.BODY}
    assert {p for p, then in replying.items() if then is P.REFUSING} == refusing


def test_the_sets_read_from_the_phase() -> None:
    assert STILL_SENDING == {P.BUFFERED, P.HEAD, P.BODY, P.REFUSING}  # a close from these lingers
    assert REPLIED == {P.ANSWERING, P.REFUSING, P.CLOSING}  # shutdown adds no second reply
    assert UNASKED == {P.OPENED, P.WAITING}  # shutdown just closes these
    assert IN_PROGRESS == {P.BUFFERED, P.HEAD, P.HEARD, P.BODY, P.SCORING}  # shutdown answers 503


def test_every_phase_is_unasked_in_progress_or_replied_and_only_one() -> None:
    assert UNASKED | IN_PROGRESS | REPLIED == set(PHASES)
    assert not (UNASKED & IN_PROGRESS or UNASKED & REPLIED or IN_PROGRESS & REPLIED)


def test_the_next_head_is_read_as_its_phase_says() -> None:
    """A kept-alive connection with nothing here waits under the idle timeout first; a new one, a head the
    channel holds (BUFFERED) or one already in h11's buffer (HEAD) is read under the header timeout."""
    assert HEAD_READERS == {
        P.OPENED: HttpConnection._read_head,
        P.WAITING: HttpConnection._read_after_idle,
        P.BUFFERED: HttpConnection._read_head,
        P.HEAD: HttpConnection._read_head,
    }


def test_a_deadline_answers_408_only_where_a_request_has_begun() -> None:
    assert set(LATE) == {P.HEAD, P.BODY}
    assert "head" in LATE[P.HEAD] and "body" in LATE[P.BODY]
