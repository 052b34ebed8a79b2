"""Tools: a spec and a ``run``. How ``run`` is declared decides the delivery guarantee.

- ``def run(input, ctx)``: local, exactly-once. It runs inside the step's transaction; its
  writes through the store's database commit with the checkpoint or roll back with it.
- ``async def run(input, ctx)``: remote, at-least-once. Make its effects idempotent with
  ``ctx.idempotency_key``, stable across retries of the same call. A cancel of the turn
  interrupts it in flight (its result is the cancelled fill) unless it declares
  ``on_cancel="finish"``.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, Protocol

import jsonschema

from .errors import FatalToolError, ToolDeclarationError
from .model import ToolSpec
from .schema_check import compile_check

#: What a replay records for an async tool that declared ``on_interrupt="report"`` and was in
#: flight when its process died (the durable envelope's repair, docs/workers.md): the model decides what to do.
INTERRUPTED_TOOL_RESULT = {
    "error": "interrupted: the tool execution was interrupted before its result was recorded; "
    "it may or may not have taken effect",
    "interrupted": True,
}
#: What a call the cancel stopped gets as its result: an unrun call of the batch, or an async tool
#: interrupted in flight (``on_cancel="interrupt"``), so every tool call keeps one result.
CANCELLED_RESULT = {"cancelled": True}
MAX_ERROR_CHARS = 2000


class StoreHandle(Protocol):
    def unwrap(self) -> Any:
        """The backend's own handle (the Django connection), or None where there is none."""


@dataclass(slots=True)
class ToolContext:
    turn_id: str
    call_id: str
    session: str
    agent: str
    store: StoreHandle
    #: stable across every retry of this call: use it to dedupe remote side effects
    idempotency_key: str
    user: dict[str, Any] | None = None
    source: str | None = None
    request_input: Callable[..., Awaitable[Any]] | None = None
    #: subagents (``subagents.py``): ``await spawn(agent, text, key=None)``, ``await spawn_all([...])``
    spawn: Callable[..., Awaitable[Any]] | None = None
    spawn_all: Callable[..., Awaitable[Any]] | None = None
    #: the turn's attachments (metadata: ``id``, ``type``, ``name``, ``size``, ``pages``); a tool
    #: in the site reads the bytes with ``agents_app.attachments.read(attachment["id"])``
    attachments: tuple[dict[str, Any], ...] = ()


@dataclass(slots=True)
class Tool:
    spec: ToolSpec
    run: Callable[..., Any]
    #: for async tools: what a replay does when the call was in flight at a crash
    on_interrupt: Literal["rerun", "report"] = "rerun"
    #: for async tools: what a cancel of the turn does to the call in flight — "interrupt" it
    #: (task cancellation; its result is the cancelled fill), or let it "finish" (its result is
    #: recorded, then the cancel takes effect)
    on_cancel: Literal["interrupt", "finish"] = "interrupt"
    #: a person approves (or edits, or rejects) each call before it runs (``approval.py``)
    approval: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.run)

    def __post_init__(self) -> None:
        if self.on_interrupt not in ("rerun", "report"):
            raise ToolDeclarationError(f"tool {self.spec.name!r}: on_interrupt must be 'rerun' or 'report'")
        if self.on_interrupt == "report" and not self.is_async:
            raise ToolDeclarationError(
                f"tool {self.spec.name!r}: on_interrupt='report' is for async tools; "
                "a sync tool is exactly-once and never interrupted"
            )
        from .approval import check_declaration

        self.approval = check_declaration(self.spec.name, self.approval)
        if self.on_cancel not in ("interrupt", "finish"):
            raise ToolDeclarationError(f"tool {self.spec.name!r}: on_cancel must be 'interrupt' or 'finish'")
        if self.on_cancel == "finish" and not self.is_async:
            raise ToolDeclarationError(
                f"tool {self.spec.name!r}: on_cancel='finish' is for async tools; "
                "a sync tool always runs to its end (a cancel waits for its step)"
            )


def tool(
    name: str,
    description: str,
    input_schema: dict[str, Any] | None = None,
    *,
    on_interrupt: Literal["rerun", "report"] = "rerun",
    on_cancel: Literal["interrupt", "finish"] = "interrupt",
    approval: dict[str, Any] | bool | None = None,
) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator: build a raw :class:`Tool` (its run gets ``(input, ctx)``). ``approval``: a
    person approves, edits or rejects each call before it runs (``approval.py``)."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        schema = input_schema or {"type": "object", "properties": {}}
        return Tool(ToolSpec(name, description, schema), fn, on_interrupt, on_cancel, approval)  # type: ignore[arg-type]

    return wrap


def format_tool_error(exc: BaseException) -> str:
    """``"<Class>: <message>"`` (no prefix for a plain Exception), cut to 2,000 chars, no stack."""
    message = str(exc)
    cls = type(exc).__name__
    text = message if type(exc) is Exception else (f"{cls}: {message}" if message else cls)
    return text[:MAX_ERROR_CHARS]


_VALIDATORS: dict[int, tuple[ToolSpec, Any, Callable[[Any], bool] | None]] = {}


def _validator(spec: ToolSpec) -> tuple[ToolSpec, Any, Callable[[Any], bool] | None]:
    """One checked validator per spec (checking a schema costs far more than validating), and
    its quick check (``schema_check``) where the schema has one."""
    cached = _VALIDATORS.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached
    cls = jsonschema.validators.validator_for(spec.input_schema)
    try:
        cls.check_schema(spec.input_schema)
    except jsonschema.SchemaError as exc:
        raise ToolDeclarationError(f"tool {spec.name!r} has an invalid input schema: {exc.message}") from exc
    cached = _VALIDATORS[id(spec)] = (spec, cls(spec.input_schema), compile_check(spec.input_schema))
    return cached


def validate_input(spec: ToolSpec, value: Any) -> str | None:
    """None when ``value`` matches the tool's schema, else a message the model can read."""
    _, validator, quick = _validator(spec)
    if quick is not None and quick(value):
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"invalid input for {spec.name}" + (f" at {where}" if where else "") + f": {error.message}"


def check_sync_result(tool: Tool, result: Any) -> Any:
    """A plain function that returned an awaitable is a declaration bug: never store it."""
    if inspect.isawaitable(result):
        if isinstance(result, types.CoroutineType):
            result.close()
        raise ToolDeclarationError(
            f"tool {tool.name!r}: run is a plain function but returned an awaitable; "
            "declare it `async def run` (remote, at-least-once)"
        )
    return result


# -- define_action: a tool from a typed function ---------------------------------------------

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset):
        return {"type": "array", "items": _schema_for(args[0]) if args else {}}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner = _schema_for(options[0]) if len(options) == 1 else {"anyOf": [_schema_for(a) for a in options]}
        return {"anyOf": [inner, {"type": "null"}]} if type(None) in args else inner
    if annotation is list:
        return {"type": "array"}
    return {}


@dataclass(slots=True)
class ActionContext:
    """All a ``define_action`` function gets besides its input: who it acts for."""

    user: dict[str, Any] | None = None


def define_action(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    on_interrupt: Literal["rerun", "report"] = "rerun",
    on_cancel: Literal["interrupt", "finish"] = "interrupt",
) -> Any:
    """Build a :class:`Tool` from a typed function.

    The input schema comes from the parameters' type hints (a parameter named ``ctx`` gets an
    :class:`ActionContext` holding only ``user``). ``async def`` stays remote, ``def`` stays local.
    """

    def build(func: Callable[..., Any]) -> Tool:
        hints = typing.get_type_hints(func)
        sig = inspect.signature(func)
        properties: dict[str, Any] = {}
        required: list[str] = []
        wants_ctx = False
        for pname, param in sig.parameters.items():
            if pname == "ctx":
                wants_ctx = True
                continue
            properties[pname] = _schema_for(hints.get(pname, Any))
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            schema["required"] = required
        spec = ToolSpec(
            name or func.__name__,
            description or inspect.getdoc(func) or func.__name__,
            schema,
        )

        def call_args(input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
            kwargs = dict(input)
            if wants_ctx:
                kwargs["ctx"] = ActionContext(user=ctx.user)
            return kwargs

        if inspect.iscoroutinefunction(func):

            async def run_async(input: dict[str, Any], ctx: ToolContext) -> Any:
                return await func(**call_args(input, ctx))

            return Tool(spec, run_async, on_interrupt, on_cancel)

        def run_sync(input: dict[str, Any], ctx: ToolContext) -> Any:
            return func(**call_args(input, ctx))

        return Tool(spec, run_sync, on_interrupt, on_cancel)

    return build(fn) if fn is not None else build


def require_handle(ctx: ToolContext) -> Any:
    """The store's transactional handle, or ``FatalToolError`` where the backend has none."""
    handle = ctx.store.unwrap()
    if handle is None:
        raise FatalToolError("this backend has no transactional store handle")
    return handle


__all__ = [
    "ActionContext",
    "CANCELLED_RESULT",
    "INTERRUPTED_TOOL_RESULT",
    "Tool",
    "ToolContext",
    "define_action",
    "format_tool_error",
    "require_handle",
    "tool",
    "validate_input",
]
