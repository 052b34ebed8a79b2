"""``JuneTester``: an agent's turns run inside a test, on the Django store of the test database.

The site's agents (``wiring.agents()``: the installed apps' ``agents/`` folders and
``JUNE_AGENT_DIRS``) run through the engine's host API (``AgentSession``: the rules of start,
answer, cancel) and the real executor, in the test's process, on the test's thread and
connection (``crashing.TestStore``): a ``def`` tool's ORM writes commit with their step inside
the test's transaction, and the test sees them at once. Turns are driven to their end (or their
park) before a call returns; a planned crash is followed by the redelivery a worker would make
once the dead attempt's lease expired (the tester's clock jumps past it, nobody sleeps).

Not the site's transports: no quotas, no session access checks, no django-q2, no channel layer
(an HTTP or websocket test uses the site's own client for those).
"""

from __future__ import annotations

import contextvars
from pathlib import Path
from typing import Any, Callable, Sequence

from asgiref.sync import async_to_sync, sync_to_async

from agents_app.providers import model_for as provider_model_for
from agents_app.runtime import (
    Agent,
    ModelError,
    ModelReply,
    ModelRequest,
    RecordingSink,
    Runtime,
    ScriptedModel,
    SessionRef,
    TurnInput,
    reply,
)
from agents_app.runtime.seams import Model
from june.testing.cassettes import Cassette
from june.testing.crashing import Crash, Plan, TestStore
from june.testing.turnrun import TurnRun, turn_run
from sessions_app import wiring
from sessions_app.access import user_identity

#: how far the clock jumps after a planned crash: past any lease the tester's attempts take
LEASE_SECONDS = 30.0
#: a turn that keeps dying is a test's bug, not a reason to loop for good
MAX_REDELIVERIES = 20

ScriptLike = Model | Sequence[ModelReply | Exception] | Callable[[ModelRequest], Any] | None


class Clock:
    """The tester's clock: moves only when a crash needs the lease to expire."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Queue:
    """The Dispatcher: what became runnable, driven by the tester before its call returns."""

    def __init__(self) -> None:
        self.turns: list[str] = []

    async def dispatch(self, turn_id: str, session: SessionRef) -> None:
        self.turns.append(turn_id)

    async def ring(self, turn_ids: Sequence[str]) -> None:
        return None  # the attempts run in this process: Runtime.live signals them


def as_model(model: ScriptLike) -> Model | None:
    """A list of replies or a function of the request: a ``ScriptedModel``; a Model as it is."""
    if model is None or hasattr(model, "stream"):
        return model  # type: ignore[return-value]
    if isinstance(model, (str, bytes)) or not (callable(model) or isinstance(model, Sequence)):
        raise TypeError(f"model= is a list of replies, a function of the request or a model, not {model!r}")
    script = model if callable(model) else by_step([_reply(r, f"reply {n}") for n, r in enumerate(model, 1)])
    return ScriptedModel(lambda request: _reply(script(request), "the script's reply", raises=False))


def _reply(value: Any, what: str, *, raises: bool = True) -> Any:
    """A script's reply: a ``reply(...)`` or an Exception as it is, a string as ``reply(text)``;
    anything else refused with what it is (raised at ``june.run``, or the turn's model error)."""
    if isinstance(value, (ModelReply, Exception)):
        return value
    if isinstance(value, str):
        return reply(value)
    error = f"{what} is {value!r}: a script's reply is reply(text, (tool, input), ...), a string or an Exception"
    if raises:
        raise TypeError(error)
    return ModelError(error, retryable=False)


def by_step(replies: list[Any]) -> Callable[[ModelRequest], Any]:
    """A list of replies as a function of the request: the reply for the turn's n-th model step
    (the assistant messages since the last person's message), so a step a crash made run again
    gets the same reply, as a real model asked the same question would give a like one."""

    def script(request: ModelRequest) -> Any:
        step = 0
        for message in reversed(request.messages):
            if str(message.role) in ("user", "trigger"):
                break
            step += str(message.role) == "assistant"
        if step >= len(replies):
            return ModelError(
                f"the script has {len(replies)} replies; the turn asked for reply {step + 1}", retryable=False
            )
        return replies[step]

    return script


def _check_point(agent: Agent, point: int | str | None) -> None:
    """A crash or cancel plan's unit: a number from 1, or a tool the agent has (a misspelt name
    would be a plan that never strikes, and a test of nothing)."""
    if point is None:
        return
    if isinstance(point, bool) or not isinstance(point, (int, str)) or (isinstance(point, int) and point < 1):
        raise ValueError(f"a crash or cancel is planned at a unit number from 1 or a tool's name, not {point!r}")
    if isinstance(point, str) and point not in agent.tools and not agent.sources:  # a source's: known later
        known = ", ".join(sorted(agent.tools)) or "none"
        raise ValueError(f"{agent.name} has no tool named {point!r} to crash or cancel at (its tools: {known})")


def _answerer(user: Any) -> tuple[str | None, dict[str, Any] | None, dict[str, Any]]:
    """The identity the site's services give an answer by ``user`` (``services._answerer``)."""
    if user is None:
        return None, None, {}
    principal = {"user_id": user.pk, "username": user.get_username()}
    return str(user.pk), principal, {"name": user.get_username(), "user_id": user.pk, "remote_addr": ""}


class JuneTester:
    """The ``june`` fixture. ``run`` starts a turn and drives it; a ``TurnRun``'s ``answer``,
    ``approve``, ``deny`` and ``cancel`` go on from where it stopped."""

    def __init__(self, *, cassettes: Path | None = None, record: bool = False, name: str = "cassette") -> None:
        #: where ``cassette()`` keeps its files, whether it records, the default file's name
        self.cassettes, self.recording, self.name = cassettes, record, name
        self.clock = Clock()
        self.store = TestStore(clock=self.clock)
        self.queue = Queue()
        self.sink = RecordingSink()
        #: agent name -> the model its turns use in this test (else the agent's own provider)
        self.models: dict[str, Model] = {}
        self.runtime = Runtime(
            store=self.store,
            agents=wiring.agents(),
            model_for=self._model_for,
            sink=self.sink,
            dispatcher=self.queue,
            clock=self.clock,
            lease_seconds=LEASE_SECONDS,
            call_sync=_on_test_thread,
        )
        self.runtime.executor.retry_delay = 0.0  # a retried model error must not make a test wait

    def _model_for(self, agent: Agent) -> Model:
        return self.models.get(agent.name) or provider_model_for(agent)

    # -- the test's calls ------------------------------------------------------------------------

    def cassette(self, name: str | None = None) -> Cassette:
        """A recorded model (``cassettes.py``): ``<cassettes>/<name>.json`` beside the test module
        (``name``: the test's name), recorded under ``pytest --june-record``, replayed otherwise."""
        assert self.cassettes is not None, "JuneTester(cassettes=...) names where cassettes live"
        return Cassette(self.cassettes / f"{name or self.name}.json", record=self.recording)

    def run(
        self,
        agent: str,
        text: str,
        *,
        model: ScriptLike = None,
        session: str = "test",
        user: Any = None,
        source: str = "web",
        crash_after: int | str | None = None,
        crash_before: int | str | None = None,
        cancel_after: int | str | None = None,
    ) -> TurnRun:
        """Start a turn of ``agent`` in ``session`` and drive it until it settles or parks.

        ``model``: a list of replies (``june.testing.reply``), a function from the request to a
        reply, or any Model (a cassette); None: the agent's own provider. ``user``: who speaks
        (the session's owner, the answerer of requests meant for the user). ``crash_after`` /
        ``crash_before``: the process dies right after that unit commits / inside it before its
        commit (a unit number, 1 being the opening, or a tool's name: the unit of its result),
        and the turn is redelivered. ``cancel_after``: a cancel is requested right after that
        unit; the turn stops at its next boundary."""
        for point in (crash_after, crash_before, cancel_after):
            _check_point(self.runtime.agent(agent), point)
        turn = self.start(agent, text, model=model, session=session, user=user, source=source)
        plan = Plan(turn.turn_id, after=crash_after, before=crash_before, cancel=cancel_after)
        if crash_after is not None or crash_before is not None or cancel_after is not None:
            self.store.plan(plan)
        return self._call(self._drain, turn.turn_id)

    def start(
        self,
        agent: str,
        text: str,
        *,
        model: ScriptLike = None,
        session: str = "test",
        user: Any = None,
        source: str = "web",
    ) -> TurnRun:
        """Queue a turn without driving it (``run`` drives it; a queued turn may be cancelled)."""
        scripted = as_model(model)
        if isinstance(scripted, Cassette):
            scripted.bind(self.runtime.agent(agent), provider_model_for)
        if scripted is not None:
            self.models[agent] = scripted
        turn_input = TurnInput(text=text, source=source, user=user_identity(user))
        row = user if getattr(user, "pk", None) else None

        async def start() -> TurnRun:
            rec = await self.runtime.session(agent, session).start_turn(turn_input, created_by=row)
            self.queue.turns.remove(rec.turn_id)  # ``run`` drives it; ``start`` leaves it queued
            return await self._read(rec.turn_id)

        return self._call(start)

    def answer(
        self, turn: TurnRun, value: Any, *, user: Any = None, operator: Any = None, input_id: str | None = None
    ) -> TurnRun:
        who, principal, record = _answerer(operator if operator is not None else user)
        if input_id is None:
            input_id = (turn.request or {}).get("id")
        host = self.runtime.session(turn.agent, turn.session)

        async def answer() -> TurnRun:
            await host.resume(
                turn.turn_id,
                str(input_id),
                value,
                by=who,
                principal=principal,
                via="admin" if operator is not None else "web",
                record=record,
            )
            return await self._drain(turn.turn_id)

        return self._call(answer)

    def cancel(self, turn: TurnRun) -> TurnRun:
        host = self.runtime.session(turn.agent, turn.session)

        async def cancel() -> TurnRun:
            await host.cancel(turn.turn_id)
            return await self._drain(turn.turn_id)

        return self._call(cancel)

    def read(self, turn: TurnRun) -> TurnRun:
        return self._call(self._read, turn.turn_id)

    # -- driving ----------------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        # a copy of the test's context, as the site's services call the host API (asgiref copies
        # the call's context variables back into the caller's)
        return contextvars.copy_context().run(async_to_sync(fn), *args)

    async def _drain(self, turn_id: str) -> TurnRun:
        """Drive ``turn_id`` and whatever became runnable (children, a woken parent, the next
        turn of a chain) until nothing is left; a crash is followed by a redelivery."""
        pending = [turn_id, *self.queue.turns]
        self.queue.turns.clear()
        redeliveries = 0
        while pending:
            current = pending.pop(0)
            try:
                await self.runtime.executor.drive(current)
            except Crash:
                redeliveries += 1
                if redeliveries > MAX_REDELIVERIES:
                    raise
                self.clock.now += LEASE_SECONDS * 2  # the dead attempt's lease runs out
                pending.insert(0, current)
            pending += [t for t in self.queue.turns if t not in pending]
            self.queue.turns.clear()
        for model in self.models.values():  # a cassette that missed fails the test, with its diff
            if isinstance(model, Cassette) and model.mismatch is not None:
                raise AssertionError(str(model.mismatch))
        return await self._read(turn_id)

    async def _read(self, turn_id: str) -> TurnRun:
        rec = await self.store.get_turn(turn_id)
        state = await self.store.load(turn_id)
        logged = await self.store.events(rec.session, 0, limit=100_000)
        model = self.models.get(rec.session.agent)
        requests = list(getattr(model, "requests", []) or [])
        return turn_run(self, state, logged, requests=requests, plan=self.store.plans.get(turn_id))


async def _on_test_thread(fn: Callable[[], Any]) -> Any:
    """Agents' synchronous hooks (``authorize_answer``) may read the host's models: on the
    thread that holds the test's connection."""
    return await sync_to_async(fn)()
