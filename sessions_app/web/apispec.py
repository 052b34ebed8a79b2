"""What an entry of the API's route table says (``Op``, ``Reply``), and how a declared shape
becomes JSON Schema.

Each area's module (``shapes_turns``, ``shapes_lists`` …) declares its request and response
shapes as typed classes — a body or a query as a pydantic model, which the view validates input
through (``inputs``); a response as a ``TypedDict`` the view returns — and lists its operations
as ``Op`` rows. ``openapi.document`` turns the rows and the classes into the OpenAPI document:
nothing in it is written twice."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable

from pydantic import BaseModel, Field, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema
from typing_extensions import NotRequired, TypedDict

REF = "#/components/schemas/{model}"
#: words, or a function that says them from the site's settings when the document is made
Words = str | Callable[[], str]

#: each error status's meaning, as every operation that may answer it says it (an ``Op``'s
#: ``responses`` may say it its own way)
ERROR_TEXT = {
    "400": "Malformed JSON (also: nested over 64 levels, NUL or an unpaired surrogate in a string, a number "
    "beyond a double's range), a wrong type, an unknown field, a bad session key or query parameter",
    "401": "No credentials, or an invalid bearer token",
    "403": "Another user's session, a failed CSRF check (cookie callers), or not an allowed answerer",
    "404": "Unknown agent, session or turn",
    "405": "Method not allowed",
    "409": "The session or turn is not in a state that allows this",
    "413": "The body is over 256 KiB, or the text over JUNE_MAX_TEXT_CHARS characters, or too long for the "
    "agent's model context window (code context_window_exceeded; the message names the limit); "
    "attachments: a file over JUNE_ATTACHMENT_MAX_BYTES, more than JUNE_ATTACHMENTS_PER_MESSAGE",
    "415": "An attached file is not a PNG, JPEG, GIF, WebP or PDF (by its bytes)",
    "422": "The answer does not match the request's schema",
    "429": "A rate limit or quota refused the turn (turns per minute, tokens per day); nothing was created. "
    "`Retry-After` (and `error.retry_after`) says in how many seconds to retry; `error.limit` names "
    "the setting",
    "500": "The agent's authorize_answer raised; nothing was applied (retry is safe)",
}
#: what every session route may answer besides its own
COMMON = ("400", "401", "403", "404", "405")


@dataclass(frozen=True)
class Reply:
    """One response: its description and, per media type, its shape (a typed class, a type
    such as ``str``, or None: no schema)."""

    description: Words
    content: dict[str, Any] = field(default_factory=dict)


def returns(description: Words, shape: Any) -> Reply:
    """A JSON response of ``shape``."""
    return Reply(description, {"application/json": shape})


class ErrorDetail(TypedDict):
    code: Annotated[str, Field(examples=["bad_request", "forbidden", "conflict", "rate_limited"])]
    message: str
    retry_after: NotRequired[Annotated[int, Field(description="429 only: seconds until a retry may pass")]]
    limit: NotRequired[Annotated[str, Field(description="429 only: the setting of the limit reached")]]


class Error(TypedDict):
    """Every error's body: a code to branch on, and a message for people."""

    error: ErrorDetail


def refusal(description: Words) -> Reply:
    """An error response, described its own way."""
    return returns(description, Error)


@dataclass(frozen=True)
class Op:
    """One operation: where, what it takes (query, headers, body per media type: pydantic
    models; the path's parameters are the shared ones, ``shapes_common.PathParams``, unless
    ``path_params`` says them its own way), what it answers (``Reply`` per status, and the error
    statuses whose meaning ``ERROR_TEXT`` gives)."""

    method: str
    path: str
    operation_id: str
    summary: str
    description: Words = ""
    path_params: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    headers: type[BaseModel] | None = None
    body: dict[str, type[BaseModel]] = field(default_factory=dict)
    body_required: bool = True
    responses: dict[str, Reply] = field(default_factory=dict)
    errors: tuple[str, ...] = COMMON
    public: bool = False  # no authentication (``security: []``)


def said(words: Words) -> str:
    return words if isinstance(words, str) else words()


class Untitled(GenerateJsonSchema):
    """pydantic's generator without the titles it makes up from names (``"title": "Turn Id"``):
    the document's words are the descriptions the classes give."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def dict_schema(self, schema: Any) -> Any:
        """A mapping whose keys are constrained says it of every key (``propertyNames``):
        pydantic's ``patternProperties`` would leave keys outside the pattern unconstrained."""
        out = super().dict_schema(schema)
        patterns = out.pop("patternProperties", None)
        if patterns:
            [(pattern, values)] = patterns.items()
            out["propertyNames"] = {"type": "string", "pattern": pattern}
            out["additionalProperties"] = values
        return out

    def generate(self, schema: Any, mode: Any = "validation") -> Any:
        return _untitled(super().generate(schema, mode))

    def generate_definitions(self, inputs: Any) -> Any:
        keys, defs = super().generate_definitions(inputs)
        return keys, _untitled(defs)


def _untitled(schema: Any) -> Any:
    """``schema`` without its ``title`` keywords (a property named ``title`` stays: its value is
    a schema, not a string) and without ``"default": null`` (a field that may be absent, not
    null); a docstring's line breaks as spaces; values of ``default``, ``examples``, ``enum``
    are data, left alone."""
    if isinstance(schema, list):
        return [_untitled(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if (key == "title" and isinstance(value, str)) or (key == "default" and value is None):
            continue
        if key == "description" and isinstance(value, str):
            out[key] = " ".join(value.split())
        else:
            out[key] = value if key in ("default", "examples", "enum", "const") else _untitled(value)
    return out


@functools.cache
def adapter(shape: Any) -> TypeAdapter[Any]:
    """A shape's adapter, built once (most of the document's cost); the schema it writes is
    made anew each time, with the site's settings of the moment (``Site``)."""
    return TypeAdapter(shape)


def schemas(shapes: list[Any]) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """The JSON Schemas of ``shapes`` (by their index) and the named classes they refer to (the
    document's ``components.schemas``), in one pass so each class is defined once."""
    inputs = [(i, "validation", adapter(shape)) for i, shape in enumerate(shapes)]
    keyed, defs = TypeAdapter.json_schemas(
        inputs, ref_template=REF, union_format="primitive_type_array", schema_generator=Untitled
    )
    return {i: schema for (i, _), schema in keyed.items()}, defs.get("$defs", {})


def parameters(model: type[BaseModel], where: str) -> list[dict[str, Any]]:
    """A query, header or path model's fields as OpenAPI parameters: each field's description
    on the parameter, its schema beside it; path parameters are required."""
    schema = adapter(model).json_schema(by_alias=True, union_format="primitive_type_array", schema_generator=Untitled)
    required = set(schema.get("required", ()))
    out = []
    for name, prop in schema["properties"].items():
        prop = dict(prop)
        param: dict[str, Any] = {"name": name, "in": where}
        if where == "path" or name in required:
            param["required"] = True
            prop.pop("default", None)  # a value the view falls back on, not one a client may leave out
        if "description" in prop:
            param["description"] = prop.pop("description")
        param["schema"] = prop
        out.append(param)
    return out
