"""A request's input read through its declared shape (the ``shapes_*`` modules): the JSON body
into its pydantic model, the query parameters and headers into theirs.

The body is parsed by ``safejson`` (depth, NUL, lone surrogates, a double's range) and bounded
by the site's body limit before pydantic sees it; the models are strict (``true`` is a boolean,
``"true"`` is not). Whatever a shape refuses is a ``BadRequest`` (400) naming the field's path —
``unknown field(s): x``, ``replace must be true or false``, ``?limit= must be an integer`` —
never a 500. Rules whose status is not a 400 (a text over its length is a 413, an attachment id
no one issued a 404) stay with the services that own them; the shapes declare them for the
document."""

from __future__ import annotations

from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from pydantic import BaseModel, ConfigDict, ValidationError

from sessions_app import safejson
from sessions_app.site_errors import BadRequest, PayloadTooLarge

M = TypeVar("M", bound=BaseModel)

#: a body's models: unknown fields refused, no coercion between JSON types
BODY = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
#: a query's or headers' models: each value a string (the view's types parse it); others ignored
QUERY = ConfigDict(extra="ignore", populate_by_name=True)

#: pydantic's error types in the API's words (the rest: pydantic's own message)
WORDS = {
    "missing": "is required",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "typed_dict_type": "must be an object",
    "literal_error": "must be {expected}",
    "string_pattern_mismatch": "must match {pattern}",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} item(s)",
}


def read_json(request: HttpRequest) -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}``), within the site's body limit."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit():
        raise BadRequest("malformed Content-Length")
    if limit is not None and int(declared) > limit:
        raise PayloadTooLarge(f"the body is larger than {limit} bytes")
    try:
        raw = request.body
    except RequestDataTooBig:
        raise PayloadTooLarge(f"the body is larger than {limit} bytes") from None
    if not raw.strip():
        return {}
    data = safejson.loads(raw)
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


def read_body(request: HttpRequest, shape: type[M]) -> M:
    """The JSON body, validated by ``shape``."""
    return validated(shape, read_json(request))


def read_query(request: HttpRequest, shape: type[M]) -> M:
    """The query parameters ``shape`` declares (the last value of a repeated one)."""
    query = request.GET
    return validated(shape, {name: query[name] for name in _names(shape) if name in query}, where="?{}=")


def read_headers(request: HttpRequest, shape: type[M]) -> M:
    """The headers ``shape`` declares (by their aliases: ``Last-Event-ID``)."""
    headers = request.headers
    return validated(shape, {name: headers[name] for name in _names(shape) if name in headers})


def _names(shape: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in shape.model_fields.items()]


def validated(shape: type[M], data: Any, *, where: str = "{}") -> M:
    try:
        return shape.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(refusal(exc, where)[:300]) from None


def refusal(exc: ValidationError, where: str = "{}") -> str:
    """The first thing wrong, by its field's path; every unknown field at once."""
    errors = exc.errors(include_url=False, include_input=False, include_context=True)
    unknown = sorted(_path(e["loc"]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        return f"unknown field(s): {', '.join(unknown)}"
    first = errors[0]
    words = WORDS[first["type"]].format(**first.get("ctx", {})) if first["type"] in WORDS else _lower(first["msg"])
    path = _path(first["loc"])
    return f"{where.format(path)} {words}" if path else words


def _path(loc: tuple[Any, ...]) -> str:
    """``attachments.0``: the field, then the items' positions and keys (pydantic's tags of a
    union's members, which are not in the input, left out)."""
    return ".".join(str(p) for p in loc if isinstance(p, int) or not str(p).startswith(("function-", "json-")))


def _lower(message: str) -> str:
    """pydantic's ``Input should be …`` as ``should be …``; a custom error's words as they are."""
    return message.removeprefix("Input ").removeprefix("Value error, ")
