"""Where one connection stands, and the table of what moves it on: no I/O, so the table is tested whole.

The connection changes phase only through `after` (h11's _state.py is the model): a step
the table does not list for the phase is a bug in the wire, and raises. What the wire
does next is read from the phase alone (the sets below, and the connection's own tables),
never from the channel: bytes that arrive while the wire's task sleeps are a step too
(ARRIVED, which the channel reports), so shutdown and a close see them at once.
"""

from __future__ import annotations

from typing import ClassVar


class Phase:
    """Where one connection stands. Compared by identity, as h11's state sentinels are: an Enum's
    member look-up and hash cost a few hundred ns each, on every transition of every request."""

    __slots__ = ("name",)
    OPENED: ClassVar[Phase]  # a new connection, nothing received: its head has the header timeout
    WAITING: ClassVar[Phase]  # kept alive, nothing of the next request: it has the idle timeout
    BUFFERED: ClassVar[Phase]  # bytes of the next head held by the channel, unread by the wire
    HEAD: ClassVar[
        Phase
    ]  # bytes of a head received: reading it, checking it, the application's answer
    HEARD: ClassVar[Phase]  # a head with no body, read whole
    BODY: ClassVar[Phase]  # the answer was a ticket: reading the body it takes
    SCORING: ClassVar[Phase]  # read whole; the ticket works
    ANSWERING: ClassVar[Phase]  # writing the reply to a request read whole
    REFUSING: ClassVar[Phase]  # writing a reply before the request was read whole: it closes
    CLOSING: ClassVar[Phase]  # flushing and closing

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Phase.{self.name}"


class Step:
    """What happened on a connection, the table's other key (an identity-compared sentinel too)."""

    __slots__ = ("name",)
    ARRIVED: ClassVar[Step]  # the channel holds bytes the wire has not read (it reports them)
    BEGUN: ClassVar[Step]  # the wire reads a head's bytes (perhaps pipelined behind the last reply)
    NO_BODY: ClassVar[Step]  # the head's request has no body, and h11 has read it whole
    TAKEN: ClassVar[Step]  # the application's ticket takes a body: read it
    READ: ClassVar[Step]  # the request is read whole: the ticket works on it
    REPLY: ClassVar[Step]  # a reply goes out
    IDLE: ClassVar[Step]  # the reply is out: wait for the next request
    CLOSE: ClassVar[Step]  # the connection ends

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Step.{self.name}"


for _name in Phase.__annotations__:
    setattr(Phase, _name, Phase(_name))
for _name in Step.__annotations__:
    setattr(Step, _name, Step(_name))

# phase -> step -> the next phase. A REPLY before the request is read whole is a refusal.
TRANSITIONS: dict[Phase, dict[Step, Phase]] = {
    Phase.OPENED: {
        Step.ARRIVED: Phase.BUFFERED,
        Step.REPLY: Phase.REFUSING,
        Step.CLOSE: Phase.CLOSING,
    },
    Phase.WAITING: {
        Step.ARRIVED: Phase.BUFFERED,
        Step.REPLY: Phase.REFUSING,
        Step.CLOSE: Phase.CLOSING,
    },
    Phase.BUFFERED: {Step.BEGUN: Phase.HEAD, Step.REPLY: Phase.REFUSING, Step.CLOSE: Phase.CLOSING},
    Phase.HEAD: {
        Step.NO_BODY: Phase.HEARD,
        Step.TAKEN: Phase.BODY,
        Step.REPLY: Phase.REFUSING,
        Step.CLOSE: Phase.CLOSING,
    },
    Phase.HEARD: {Step.READ: Phase.SCORING, Step.REPLY: Phase.ANSWERING, Step.CLOSE: Phase.CLOSING},
    Phase.BODY: {Step.READ: Phase.SCORING, Step.REPLY: Phase.REFUSING, Step.CLOSE: Phase.CLOSING},
    Phase.SCORING: {Step.REPLY: Phase.ANSWERING, Step.CLOSE: Phase.CLOSING},
    Phase.ANSWERING: {Step.IDLE: Phase.WAITING, Step.BEGUN: Phase.HEAD, Step.CLOSE: Phase.CLOSING},
    Phase.REFUSING: {Step.CLOSE: Phase.CLOSING},
    Phase.CLOSING: {},
}
# Nothing of a request received: shutdown just closes the connection, and a deadline passes in silence.
UNASKED = frozenset({Phase.OPENED, Phase.WAITING})
# A request in progress: shutdown's end of the grace answers it 503, never silence.
IN_PROGRESS = frozenset({Phase.BUFFERED, Phase.HEAD, Phase.HEARD, Phase.BODY, Phase.SCORING})
# The client may still be sending: a close lingers so that its bytes do not turn our answer into a reset.
STILL_SENDING = frozenset({Phase.BUFFERED, Phase.HEAD, Phase.BODY, Phase.REFUSING})
# A reply is already going out (or the connection is ending): shutdown adds no second one.
REPLIED = frozenset({Phase.ANSWERING, Phase.REFUSING, Phase.CLOSING})


class IllegalStep(RuntimeError):
    """The wire took a step its phase does not allow (a bug in the wire, never the client's doing)."""


def after(phase: Phase, step: Step) -> Phase:
    """The phase `step` leads to from `phase`; IllegalStep where the table lists none."""
    try:
        return TRANSITIONS[phase][step]
    except KeyError:
        raise IllegalStep(f"connection phase {phase.name} has no step {step.name}") from None
