"""The order in which scorer calls reach the engine's one worker: a turn each, round-robin over callers.

Rule 1: one call at a time. A call waits here, queued by the event loop in its caller's queue; the
worker holds at most the one running call. When it ends, the worker thread itself chooses the next
and submits it, in one step under the queues' lock (no `await`, no wait for a busy loop), so nothing
overtakes the chosen call and the worker is not left idle; the loop then tells the ended call's
awaiter. Every touch of the queues, from the loop or the worker, holds that lock.
Rule 2: callers take turns, one call each (round-robin), in the order they came to have a call
waiting; the caller whose call holds the worker is last in the round until the next choice, so a
caller that comes while another's call runs goes before that caller's next call. Within a caller,
first come first served. A follow-up call (a request's second or third call) goes
ahead of its caller's later calls, behind any earlier follow-up, and still waits its caller's turn.
Rule 3: background work runs only when no caller's call is waiting; once started it delays a caller's
call by at most that one call. A drain drops the queued background calls and takes no more; callers'
queued calls still run. A dropped call's awaiter sees CancelledError, as after `close`.
Rule 4: a queue belongs to a caller's name, not to the table of callers: a caller removed by a reload
keeps its queued calls, which run.
Rule 5: `Turns` is the order alone (no asyncio, no lock), so the estimates read the same queues the
worker is fed from (`Dispatcher.ahead`): what runs before a new call is known from one place.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Call:
    """One scorer call waiting for, or holding, the worker: whose turn it takes and what it costs."""

    caller: str
    kind: str  # how its rows are priced: the scorer method's kind ("direct" or "shared")
    rows: int
    work: Callable[[], Any] = field(default=lambda: None, repr=False)  # what the worker runs
    follow_up: bool = False
    background: bool = False
    started: bool = False
    outcome: asyncio.Future[Any] | None = field(default=None, repr=False)


class Turns:
    """The queues: one per caller with a call waiting, their turn order, the background queue, and the
    call holding the worker. Pure bookkeeping; the Dispatcher holds its lock around every use."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Call]] = {}
        self._order: deque[str] = deque()  # callers with a queued call, in turn order (not `_last`)
        self._last: str | None = (
            None  # the caller of the call chosen last: it rejoins at the next choice
        )
        self.background: deque[Call] = deque()
        self.running: Call | None = None
        self.draining = False
        self._seen: dict[str, None] = {}  # every caller that queued a call: its gauge stays, at 0

    def put(self, call: Call) -> None:
        """Queue a call: a caller's at the end of its queue (a follow-up behind its earlier follow-ups
        only); background work at the end of the background queue."""
        if call.background:
            self.background.append(call)
            return
        self._seen[call.caller] = None
        queue = self._queues.get(call.caller)
        if queue is None:
            queue = self._queues[call.caller] = deque()
            if call.caller != self._last:
                self._order.append(call.caller)  # joins the end of the round
        if call.follow_up:
            queue.insert(sum(1 for _ in itertools.takewhile(lambda c: c.follow_up, queue)), call)
        else:
            queue.append(call)

    def take(self) -> Call | None:
        """The next call to run, now holding the worker: the first caller's in turn (who then goes to the
        end of the round), else background work (not while draining), else None. The caller chosen
        last rejoins the round's end first, behind every caller that came meanwhile."""
        if self._last is not None and self._last in self._queues:
            self._order.append(self._last)
        self._last = call = None
        if self._order:
            caller = self._last = self._order.popleft()
            queue = self._queues[caller]
            call = queue.popleft()
            if not queue:
                del self._queues[caller]
        elif self.background and not self.draining:
            call = self.background.popleft()
        if call is not None:
            call.started = True
        self.running = call
        return call

    def withdraw(self, call: Call) -> None:
        """A queued call whose awaiter left: out of its queue, never to run."""
        if call.background:
            self.background.remove(call)
            return
        queue = self._queues[call.caller]
        queue.remove(call)
        if not queue:
            del self._queues[call.caller]
            if call.caller in self._order:
                self._order.remove(call.caller)

    def ahead(self, caller: str) -> Counter[str]:
        """The rows, by kind, that run before a new call of `caller` given the queues now: the running
        call whole (background work too), `caller`'s queued calls, and of each other caller's queue at
        most as many calls as `caller` waits turns for (its queued calls plus its own turn). Queued
        background work runs after it. Errs high: a caller behind it in the round gets one turn fewer."""
        rows: Counter[str] = Counter()
        if self.running is not None:
            rows[self.running.kind] += self.running.rows
        turns = len(self._queues.get(caller, ())) + 1
        for name, queue in self._queues.items():
            for call in itertools.islice(queue, None if name == caller else turns):
                rows[call.kind] += call.rows
        return rows

    def depths(self) -> dict[str, int]:
        """Queued calls (not the running one) of every caller that ever queued one (0 when none now)."""
        return {caller: len(self._queues.get(caller, ())) for caller in self._seen}

    def drop_background(self) -> list[Call]:
        """Take every queued background call out (a drain or a close), returning them."""
        dropped = list(self.background)
        self.background.clear()
        return dropped

    def drop_all(self) -> list[Call]:
        """Take every queued call out (a close), returning them."""
        dropped = [call for queue in self._queues.values() for call in queue]
        self._queues.clear()
        self._order.clear()
        return dropped + self.drop_background()


class Dispatcher:
    """Feeds `executor` (the engine's one worker) from `turns`, one call at a time (Rule 1). The loop
    queues and withdraws calls, and reads the queues for the estimates and the gauges; the worker
    thread, as a call returns, takes the next; every touch of `turns` holds `_lock`."""

    def __init__(self, executor: Executor) -> None:
        self.turns = Turns()
        self._lock = threading.Lock()
        self._executor = executor
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def run(self, call: Call) -> Any:
        """Queue `call` for its turn and return what its work returns. Its awaiter cancelled while it is
        queued: withdrawn, it never runs. Cancelled while it runs: it still holds the worker, so the
        awaiter (and the admission slot it holds) waits until the work returns, then is cancelled."""
        if self._closed:
            raise RuntimeError("the engine is closed")
        self._loop = asyncio.get_running_loop()
        outcome = call.outcome = self._loop.create_future()
        with self._lock:
            if call.background and self.turns.draining:
                outcome.cancel()  # a drain takes no more background work (Rule 3)
            else:
                self.turns.put(call)
                if self.turns.running is None:
                    self._next()
        try:
            return await asyncio.shield(outcome)
        except asyncio.CancelledError:
            with self._lock:
                started = call.started
                if not started and not outcome.cancelled():  # a dropped call is out already
                    self.turns.withdraw(call)
            if not started:
                outcome.cancel()
            else:
                await asyncio.wait([outcome])
                if not outcome.cancelled():
                    outcome.exception()  # read it: the awaiter left, so its failure is no one's error
            raise

    def _next(self) -> None:
        """Choose the next call and hand it to the worker, in one step (Rule 1); holds `_lock`."""
        if not self._closed and (call := self.turns.take()) is not None:
            self._executor.submit(self._run, call)

    def _run(self, call: Call) -> None:
        """On the worker thread: the call's work, then at once the next call (no wait for the loop,
        which may be busy), then the loop tells this call's awaiter."""
        result, error = None, None
        try:
            result = call.work()
        except BaseException as failed:  # noqa: BLE001 - every failure is the awaiter's to see
            error = failed
        with self._lock:
            self.turns.running = None
            self._next()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._ended, call, result, error)
            except RuntimeError:  # closed in between: no one is left to tell
                pass

    @staticmethod
    def _ended(call: Call, result: Any, error: BaseException | None) -> None:
        """On the loop: the ended call's awaiter is told."""
        outcome = call.outcome
        if outcome is None or outcome.done():
            return
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(result)

    def ahead(self, caller: str) -> Counter[str]:
        """`Turns.ahead`, read under the lock."""
        with self._lock:
            return self.turns.ahead(caller)

    def depths(self) -> dict[str, int]:
        """`Turns.depths`, read under the lock."""
        with self._lock:
            return self.turns.depths()

    def background_depth(self) -> int:
        """Background calls waiting."""
        with self._lock:
            return len(self.turns.background)

    def drain(self) -> None:
        """Stop dispatching background work: the queued is dropped, new background work refused."""
        with self._lock:
            self.turns.draining = True
            dropped = self.turns.drop_background()
        self._drop(dropped)

    def close(self) -> None:
        """Drop every queued call; the one chosen to run finishes on its thread and its awaiter is
        told (the executor must not cancel it: shut it down without cancelling futures)."""
        with self._lock:
            self._closed = True
            dropped = self.turns.drop_all()
        self._drop(dropped)

    @staticmethod
    def _drop(calls: list[Call]) -> None:
        for call in calls:
            if call.outcome is not None:
                call.outcome.cancel()
