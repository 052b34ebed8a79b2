"""The OpenAPI 3.1 description of the HTTP API, served at /api/openapi.json: generated from the
route table of each area (``shapes_turns``, ``shapes_lists``, ``shapes_files``,
``shapes_branches``, ``shapes_frontends``) and the typed classes its rows name (``apispec``
says how). A test checks that every route of ``api_urls`` is described."""

from __future__ import annotations

import re
from typing import Any

from sessions_app.web import shapes_branches, shapes_files, shapes_frontends, shapes_lists, shapes_turns
from sessions_app.web.apispec import ERROR_TEXT, Error, Op, Reply, parameters, returns, said, schemas
from sessions_app.web.links import mount
from sessions_app.web.shapes_common import NAMED, SESSION_PATH, PathParams

__all__ = ["SESSION_PATH", "document"]

SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "A per-user token: `python manage.py june token <username>` or the admin",
    },
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "sessionid",
        "description": "The Django login; unsafe methods need the X-CSRFToken header",
    },
}
SELF = Op(
    "get",
    "/api/openapi.json",
    "openapi",
    "This document",
    responses={"200": returns("The OpenAPI description", dict[str, Any])},
    errors=(),
    public=True,
)


def operations() -> list[Op]:
    return [
        SELF,
        *shapes_turns.OPERATIONS,
        *shapes_lists.OPERATIONS,
        *shapes_files.OPERATIONS,
        *shapes_branches.OPERATIONS,
        *shapes_frontends.OPERATIONS,
    ]


def document() -> dict[str, Any]:
    ops = operations()
    shapes: list[Any] = [Error, *NAMED]
    for op in ops:
        shapes += op.body.values()
        shapes += [s for reply in op.responses.values() for s in reply.content.values() if s is not None]
    found, defs = schemas(shapes)
    schema_of = {id(shape): found[i] for i, shape in enumerate(shapes)}
    paths: dict[str, Any] = {}
    for op in ops:
        item = paths.setdefault(op.path, {})
        named = re.findall(r"{(\w+)}", op.path)
        if named:
            shared = parameters(op.path_params or PathParams, "path")
            item["parameters"] = [p for p in shared if p["name"] in named]
        item[op.method] = _operation(op, schema_of)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "June for Django HTTP API",
            "version": "1",
            "description": "Agent turns as durable processes: start turns, stream their events, answer "
            "parked requests, cancel, reset, edit and regenerate as branches. See docs/api.md.",
        },
        # the paths are relative to June's mount: "/" at the root, "/assistant" under a prefix
        "servers": [{"url": mount().rstrip("/") or "/"}],
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
        "components": {"securitySchemes": SECURITY_SCHEMES, "schemas": defs},
    }


def _operation(op: Op, schema_of: dict[int, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary}
    if op.description:
        out["description"] = said(op.description)
    if op.public:
        out["security"] = []
    params = [
        *(parameters(op.headers, "header") if op.headers else []),
        *(parameters(op.query, "query") if op.query else []),
    ]
    if params:
        out["parameters"] = params
    if op.body:
        out["requestBody"] = {
            "required": op.body_required,
            "content": {media: {"schema": schema_of[id(shape)]} for media, shape in op.body.items()},
        }
    replies = {**{code: Reply(ERROR_TEXT[code], {"application/json": Error}) for code in op.errors}, **op.responses}
    out["responses"] = {code: _reply(replies[code], schema_of) for code in sorted(replies)}
    return out


def _reply(reply: Reply, schema_of: dict[int, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"description": said(reply.description)}
    if reply.content:
        out["content"] = {
            media: {} if shape is None else {"schema": schema_of[id(shape)]} for media, shape in reply.content.items()
        }
    return out
