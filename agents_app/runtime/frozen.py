"""Frozen dataclasses that cost little more to make than plain ones.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (its
own ``__setattr__`` refuses): a generic attribute lookup per field, so a 12-field ``Message``
costs about twice the instructions of the same class unfrozen, and a turn makes dozens of
frozen records (messages, the turn's record, events, requests). ``fast_init`` gives such a
class an ``__init__`` that sets each slot through the slot's own descriptor instead: the same
signature (names, order, defaults, keyword-only fields), default factories called per
instance, ``__post_init__`` called after, the same instance in the end. Assignment after
construction is refused as before (the class's ``__setattr__`` is untouched).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

#: the ``__init__`` dataclasses generated, by class (what ``fast_init`` must equal: tests)
GENERATED: dict[type, Any] = {}


def fast_init(cls: T) -> T:
    """Replace the generated ``__init__`` of a frozen, slotted dataclass (apply it above
    ``@dataclass(frozen=True, slots=True)``)."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    assert params.frozen and params.init and "__slots__" in cls.__dict__, cls
    every = cls.__dataclass_fields__  # type: ignore[attr-defined]
    assert all(
        f._field_type is dataclasses._FIELD or f._field_type is dataclasses._FIELD_CLASSVAR  # type: ignore[attr-defined]
        for f in every.values()
    ), f"{cls}: InitVar fields are not handled"
    fields = dataclasses.fields(cls)
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        setter = f"_set_{f.name}"
        names[setter] = _descriptor(cls, f.name).__set__
        if not f.init:  # not a parameter: its default, or its factory's value
            if f.default_factory is not dataclasses.MISSING:
                names[f"_make_{f.name}"] = f.default_factory
                body.append(f"    {setter}(self, _make_{f.name}())")
            else:
                names[f"_default_{f.name}"] = f.default
                body.append(f"    {setter}(self, _default_{f.name})")
            continue
        if f.default_factory is not dataclasses.MISSING:
            names[f"_make_{f.name}"] = f.default_factory
            param = f"{f.name}=_FACTORY"
            body.append(f"    {setter}(self, _make_{f.name}() if {f.name} is _FACTORY else {f.name})")
        else:
            if f.default is not dataclasses.MISSING:
                names[f"_default_{f.name}"] = f.default
                param = f"{f.name}=_default_{f.name}"
            else:
                param = f.name
            body.append(f"    {setter}(self, {f.name})")
        (keyword if f.kw_only else positional).append(param)
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({signature}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, names)  # noqa: S102 (as dataclasses makes its own)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    generated = cls.__dict__["__init__"]  # dataclasses' own, replaced by this one
    init.__annotations__ = dict(generated.__annotations__)
    GENERATED[cls] = generated
    type.__setattr__(cls, "__init__", init)
    return cls


#: the default of a parameter whose field has a default factory: dataclasses' own marker (its
#: signature shows ``<factory>``), so the signatures are the same
_FACTORY = dataclasses._HAS_DEFAULT_FACTORY  # type: ignore[attr-defined]


def _descriptor(cls: type, name: str) -> Any:
    """The slot's member descriptor (on the class or the base that declares it)."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if found is not None and hasattr(found, "__set__"):
            return found
    raise TypeError(f"{cls.__name__}.{name} is not a slot")
