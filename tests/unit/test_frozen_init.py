"""``frozen.fast_init``: the engine's frozen records are made by an ``__init__`` that sets each
slot through its descriptor (a frozen dataclass's own sets each with ``object.__setattr__``, about
twice the instructions). Pins: it is the generated ``__init__`` in all but cost — the same
signature, the same instance for every way of calling it, a fresh default per instance, and
assignment after construction still refused."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from agents_app.runtime import events, messages, model, position, seams
from agents_app.runtime.frozen import GENERATED, fast_init

SAMPLES = {  # values of the right shape for the fields that take no default
    "turn_id": "t1",
    "role": messages.Role.TOOL,
    "id": "c1",
    "name": "noop",
    "input": {"n": 1},
    "agent": "ops",
    "key": "s1",
    "text": "hi",
    "session": seams.SessionRef("ops", "s1"),
    "status": seams.TurnStatus.RUNNING,
    "seq": 3,
    "event": events.TurnStarted("t1"),
    "system": "sys",
    "messages": (),
    "tools": (),
    "kind": position.NextKind.MODEL,
}


def test_the_hot_records_are_made_by_fast_init():
    made = {
        messages.Message,
        messages.ToolCall,
        seams.SessionRef,
        seams.TurnInput,
        seams.TurnRecord,
        seams.LoggedEvent,
        model.ModelRequest,
        model.ModelReply,
        model.TextDelta,
        model.ReasoningDelta,
        position.Next,
        events.TurnEvent,
        *events.EVENT_TYPES.values(),
    }
    assert made <= set(GENERATED)


@pytest.mark.parametrize("cls", sorted(GENERATED, key=lambda c: c.__qualname__), ids=lambda c: c.__qualname__)
def test_fast_init_is_the_generated_init(cls):
    generated = GENERATED[cls]
    assert inspect.signature(cls.__init__) == inspect.signature(generated)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = {
        f.name: SAMPLES[f.name]
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }

    def both(*args, **kwargs):
        mine = cls(*args, **kwargs)
        theirs = object.__new__(cls)
        generated(theirs, *args, **kwargs)
        assert mine == theirs and repr(mine) == repr(theirs)
        assert [getattr(mine, f.name) for f in dataclasses.fields(cls)] == [
            getattr(theirs, f.name) for f in dataclasses.fields(cls)
        ]
        return mine

    made = both(**required)
    both(*[required[f.name] for f in fields if f.name in required])  # positionally
    every = {f.name: required.get(f.name, f"v-{f.name}") for f in fields}
    both(**every)
    for f in fields:  # a default factory's value is made per instance
        if f.default_factory is not dataclasses.MISSING:
            assert getattr(made, f.name) is not getattr(cls(**required), f.name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, fields[0].name, "changed")
    assert dataclasses.replace(made) == made
    if _hashable(made):  # fields holding dicts make an instance unhashable, as before
        assert hash(made) == hash(dataclasses.replace(made))
    with pytest.raises(TypeError):
        cls(**required, no_such_field=1)


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def test_defaults_and_post_init_of_any_frozen_slotted_dataclass():
    calls = []

    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Sample:
        a: int
        b: list = dataclasses.field(default_factory=list)
        c: str = "c"
        d: int = dataclasses.field(default=4, init=False)
        e: int = dataclasses.field(default=5, kw_only=True)

        def __post_init__(self) -> None:
            calls.append(self.a)

    assert inspect.signature(Sample.__init__) == inspect.signature(GENERATED[Sample])
    one, two = Sample(1), Sample(2, e=6)
    assert (one.a, one.b, one.c, one.d, one.e) == (1, [], "c", 4, 5) and one.b is not two.b and two.e == 6
    assert calls == [1, 2]
    with pytest.raises(TypeError):
        Sample(1, [], "c", 6)  # e is keyword-only
