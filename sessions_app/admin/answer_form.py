"""The approval inbox's answer form, built from the parked request's JSON schema: a yes/no
pair, a field per scalar or object property, a declared tool approval's decision with the
tool's input to edit, else raw JSON. The schema itself is checked by the service when the
answer is applied; the form only shapes what the operator types."""

from __future__ import annotations

import json
from typing import Any

from django import forms

MAX_JSON_CHARS = 64 * 1024
SCALARS = ("string", "number", "integer", "boolean")


# -- the answer form, built from the request's JSON schema ----------------------------------------


def form_kind(schema: Any) -> str:
    """``boolean`` (Approve/Deny), ``scalar`` (one field), ``object`` (a field per property) or
    ``json`` (a textarea, for anything else)."""
    if not isinstance(schema, dict):
        return "json"
    if schema.get("type") == "boolean" and "enum" not in schema:
        return "boolean"
    if _scalar(schema):
        return "scalar"
    props = schema.get("properties")
    if (
        schema.get("type") == "object"
        and isinstance(props, dict)
        and props
        and all(isinstance(p, dict) and _scalar(p) for p in props.values())
    ):
        return "object"
    return "json"


def _enum(schema: dict[str, Any]) -> list[Any] | None:
    values = schema.get("enum")
    if isinstance(values, list) and values and all(v is None or isinstance(v, (str, int, float, bool)) for v in values):
        return values
    return None


def _scalar(schema: dict[str, Any]) -> bool:
    return _enum(schema) is not None or ("enum" not in schema and schema.get("type") in SCALARS)


def _field(schema: dict[str, Any], *, required: bool, label: str) -> forms.Field:
    help_text = str(schema.get("description") or "")[:500]
    values = _enum(schema)
    if values is not None:
        choices = [(str(i), json.dumps(v)) for i, v in enumerate(values)]
        if not required:
            choices = [("", "—")] + choices
        return forms.ChoiceField(choices=choices, required=required, label=label, help_text=help_text)
    kind = schema.get("type")
    if kind == "integer":
        return forms.IntegerField(required=required, label=label, help_text=help_text)
    if kind == "number":
        return forms.FloatField(required=required, label=label, help_text=help_text)
    if kind == "boolean":
        choices = [("", "—")] if not required else []
        return forms.ChoiceField(
            choices=choices + [("true", "Yes"), ("false", "No")], required=required, label=label, help_text=help_text
        )
    # constraints (length, pattern, ranges) are the JSON schema's job, checked server-side (422)
    return forms.CharField(
        required=required,
        strip=False,
        max_length=MAX_JSON_CHARS,
        label=label,
        help_text=help_text,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


def _value(schema: dict[str, Any], raw: Any) -> Any:
    values = _enum(schema)
    if values is not None:
        return values[int(raw)]
    if schema.get("type") == "boolean":
        return raw == "true"
    return raw


class AnswerForm(forms.Form):
    """The hidden ``input_id`` pins the request the form was drawn for: answering after the
    turn moved on is a 409, never an answer to a different question."""

    input_id = forms.CharField(widget=forms.HiddenInput, max_length=200)

    def __init__(self, *args: Any, request_spec: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_spec = request_spec
        self.schema = request_spec.get("schema")
        self.kind = "tool_approval" if request_spec.get("kind") == "tool_approval" else form_kind(self.schema)
        if self.kind == "tool_approval":  # a declared approval of a tool call: approve, edit or reject
            self.fields["decision"] = forms.ChoiceField(
                choices=[
                    ("approve", "Approve: run it as proposed"),
                    ("edit", "Edit: run it with the input below"),
                    ("reject", "Reject: never run it"),
                ]
            )
            self.fields["tool_input"] = forms.JSONField(
                label=f"Input of {request_spec.get('tool')}",
                required=False,
                max_length=MAX_JSON_CHARS,
                initial=request_spec.get("input"),
                widget=forms.Textarea(attrs={"rows": 6, "cols": 60}),
                help_text="Used with Edit; checked against the tool's schema.",
            )
            self.fields["message"] = forms.CharField(
                label="Note for the agent",
                required=False,
                max_length=2000,
                help_text="Used with Reject: the agent reads it.",
            )
        elif self.kind == "boolean":
            self.fields["decision"] = forms.ChoiceField(choices=[("approve", "Approve"), ("deny", "Deny")])
        elif self.kind == "scalar":
            self.fields["answer"] = _field(self.schema, required=True, label="Answer")
        elif self.kind == "object":
            required = set(self.schema.get("required") or [])
            for name, prop in self.schema["properties"].items():
                self.fields[f"f_{name}"] = _field(prop, required=name in required, label=str(prop.get("title") or name))
        else:
            self.fields["answer_json"] = forms.JSONField(
                label="Answer (JSON)", max_length=MAX_JSON_CHARS, widget=forms.Textarea(attrs={"rows": 6, "cols": 60})
            )

    def answer(self) -> Any:
        """The answer as JSON, from a valid form (the schema itself is checked by the service)."""
        data = self.cleaned_data
        if self.kind == "tool_approval":
            answer: dict[str, Any] = {"decision": data["decision"]}
            if data["decision"] == "edit":
                answer["input"] = data.get("tool_input")
            if data["decision"] == "reject" and data.get("message"):
                answer["message"] = data["message"]
            return answer
        if self.kind == "boolean":
            return data["decision"] == "approve"
        if self.kind == "scalar":
            return _value(self.schema, data["answer"])
        if self.kind == "object":
            return {
                name: _value(prop, data[f"f_{name}"])
                for name, prop in self.schema["properties"].items()
                if data.get(f"f_{name}") not in (None, "")
            }
        return data["answer_json"]

    def errors_text(self) -> str:
        return "; ".join(
            f"{'answer' if k in ('__all__', 'answer_json') else k.removeprefix('f_')}: {' '.join(v)}"
            for k, v in self.errors.items()
        )
