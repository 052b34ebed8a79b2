"""Attachments through the official SDK to a local Messages API: image and document blocks
before the text, the bytes read again for every model call, a missing file a text note."""

from __future__ import annotations

import base64

from agents_app.providers.anthropic import AnthropicModel
from agents_app.providers.anthropic_request import build_messages
from agents_app.runtime.messages import Message, Role
from agents_app.runtime.model import ModelRequest, ToolSpec
from tests.attachment_files import pdf, png

from .fake_messages_api import FakeMessagesAPI, StreamBuilder

PHOTO = {"id": "a" * 32, "type": "image/png", "name": "photo.png", "size": 0, "pages": None}
REPORT = {"id": "b" * 32, "type": "application/pdf", "name": "report.pdf", "size": 0, "pages": 3}
FILES = {PHOTO["id"]: png(), REPORT["id"]: pdf(3)}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_build_messages_puts_image_and_document_blocks_before_the_text():
    opening = Message(Role.USER, text="what are these?", attachments=(PHOTO, REPORT))
    assert build_messages([opening], FILES.get) == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": b64(FILES[PHOTO["id"]])},
                },
                {
                    "type": "document",
                    "title": "report.pdf",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": b64(FILES[REPORT["id"]])},
                },
                {"type": "text", "text": "what are these?"},
            ],
        }
    ]


def test_a_missing_file_is_a_text_note_not_a_crash():
    content = build_messages([Message(Role.USER, text="", attachments=(PHOTO,))], lambda _id: None)[0]["content"]
    assert content == [{"type": "text", "text": "[attachment photo.png (image/png) is no longer available]"}]


async def test_every_model_call_sends_the_attachments_once_through_the_sdk():
    reads: list[str] = []

    def read(attachment_id: str) -> bytes | None:
        reads.append(attachment_id)
        return FILES.get(attachment_id)

    with FakeMessagesAPI() as api:
        api.script(
            StreamBuilder(input_tokens=10).tool_use("toolu_1", "look", ["{}"]).done("tool_use", output_tokens=5),
            StreamBuilder(input_tokens=20).text("A red square and 3 pages.").done("end_turn", output_tokens=5),
        )
        model = AnthropicModel(api_key="k", base_url=api.base_url, read_attachment=read, prompt_cache=False)
        opening = Message(Role.USER, text="look", attachments=(PHOTO, REPORT))
        call = Message(Role.ASSISTANT, blocks=({"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}},))
        result = Message(Role.TOOL, call_id="toolu_1", name="look", result={"ok": True})
        tools = (ToolSpec("look", "looks", {"type": "object"}),)
        for messages in ((opening,), (opening, call, result)):
            async for _ in model.stream(ModelRequest(system="", messages=messages, tools=tools)):
                pass
        assert api.unscripted == 0
    assert reads == [PHOTO["id"], REPORT["id"]] * 2  # read from storage per call, never cached
    for body in api.bodies:
        first = body["messages"][0]["content"]
        assert [b["type"] for b in first] == ["image", "document", "text"]
        assert first[0]["source"]["data"] == b64(FILES[PHOTO["id"]])
        assert sum(b["type"] in ("image", "document") for m in body["messages"] for b in m["content"]) == 2
