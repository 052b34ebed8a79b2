"""A conversation's branches over HTTP: edit an earlier message (a fork), regenerate the last
reply, list and switch branches — their shapes and their rows of the route table (the views:
``branch_api``)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, Field, WithJsonSchema
from typing_extensions import TypedDict

from sessions_app.web.apispec import COMMON, Op, refusal, returns
from sessions_app.web.shapes_common import ASKS_TEXT, SESSION_PATH, AttachmentIds, DateTime, SessionPath, Text
from sessions_app.web.shapes_turns import Nothing

#: a position or a generation number: what an int4 column holds (others are 404s)
NUMBER_RE = re.compile(r"[0-9]{1,9}")
Number = WithJsonSchema({"type": "string", "pattern": f"^{NUMBER_RE.pattern}$"})


class Fork(BaseModel):
    """An edit: the new text of the message (and the uploads it carries)."""

    model_config = ASKS_TEXT
    text: Text = None  # type: ignore[assignment]
    attachments: AttachmentIds = []


class ForkPath(SessionPath):
    index: Annotated[
        str,
        Number,
        Field(
            description="The position of the message to edit in the live branch (`openings[].index` of "
            "`GET …/branches`)"
        ),
    ]


class SwitchPath(SessionPath):
    generation: Annotated[str, Number, Field(description="A branch of the live branch's tree")]


class BranchQueued(TypedDict):
    turn_id: str
    status: str
    generation: Annotated[int, Field(description="The new branch")]


class Opening(TypedDict):
    index: int
    turn_id: str
    alternatives: list[int]
    current: int


class Branch(TypedDict):
    generation: int
    parent: int | None
    fork_index: int
    created_at: DateTime


class Branches(TypedDict):
    generation: Annotated[int, Field(description="The live branch")]
    seq: Annotated[
        int,
        Field(
            description="The session's last event number (any branch): it moves with every switch, so a page "
            "that finds another branch live can tell a new switch from one it already followed"
        ),
    ]
    openings: Annotated[
        list[Opening],
        Field(
            description="Each message of the live branch a person sent to open a turn, oldest first: where an "
            "edit forks (`index`) and the branches a switcher steps through there (`alternatives`, oldest "
            "first; `current` holds the live branch's message)"
        ),
    ]
    branches: Annotated[list[Branch], Field(description="The live branch's tree (empty before its first fork)")]


class Switched(TypedDict):
    generation: int


BUSY = refusal(
    "The session has a turn queued, running or waiting for an answer (code session_busy): branches are made "
    "and switched only while it is idle; or (regenerate) the turn is not the live branch's last turn a "
    "person opened"
)
QUEUED = returns("The new branch is live and its first turn is queued (follow it at `Location`)", BranchQueued)

OPERATIONS = [
    Op(
        "post",
        f"{SESSION_PATH}/messages/{{index}}/fork",
        "forkAtMessage",
        "Edit an earlier message: a new branch from just before it",
        "The new branch shares the messages before `index` and is made live; `text` is "
        "queued as its first turn, whose model sees this branch only. The branch left "
        "stays (`GET …/branches`, `POST …/branches/{generation}/switch`).",
        path_params=ForkPath,
        body={"application/json": Fork},
        responses={
            "202": QUEUED,
            "409": BUSY,
            "422": refusal(
                "The message is not one a person sent to open a turn of the live branch (code not_a_fork_point)"
            ),
        },
        errors=(*COMMON, "413", "429"),
    ),
    Op(
        "post",
        f"{SESSION_PATH}/turns/{{turn_id}}/regenerate",
        "regenerateTurn",
        "Send the last turn again, on a new branch",
        "The live branch's last turn a person opened is sent again (its attachments "
        "too) as the first turn of a new branch forked just before it; the reply it had "
        "stays on the branch left.",
        body={"application/json": Nothing},
        body_required=False,
        responses={"202": QUEUED, "409": BUSY},
        errors=(*COMMON, "413", "429"),
    ),
    Op(
        "get",
        f"{SESSION_PATH}/branches",
        "listBranches",
        "The live branch, its tree and its switchers",
        responses={"200": returns("Branches", Branches)},
    ),
    Op(
        "post",
        f"{SESSION_PATH}/branches/{{generation}}/switch",
        "switchBranch",
        "Make another branch live",
        path_params=SwitchPath,
        body={"application/json": Nothing},
        body_required=False,
        responses={"200": returns("Live", Switched), "409": BUSY},
        errors=(*COMMON, "413"),
    ),
]
