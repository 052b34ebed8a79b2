"""The scorers: pure functions of a case's expectations and what its turn did.

``expect`` keys (any together; a case passes when every one does):

- ``equals`` / ``contains`` (a string or a list, all present) / ``regex`` (a search, with a
  bounded length and time): the final text;
- ``tool_calls``: ``[{"name", "input"?}]``, each called (in this order), its input holding
  these keys with these values;
- ``json_schema``: the final text is JSON valid against it;
- ``max_cost`` (US dollars), ``max_latency`` (seconds), ``max_tokens`` (input + output);
- ``status``: the turn's end (default ``completed``);
- ``judge``: ``{"prompt": ...}``: an LLM judge through June's own provider (``judge.py``), whose
  reply starts with PASS or FAIL.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any, Callable

import jsonschema
import regex

#: a regex is the dataset author's, run over a model's answer: bounded, as every input is —
#: in length, and in time (``regex``'s matcher gives up after ``REGEX_SECONDS``: Python's ``re``
#: backtracks for hours on a pattern such as ``(a|aa)+$``, holding the worker or page that scores)
MAX_PATTERN = 500
REGEX_SECONDS = 0.5


@dataclass(frozen=True)
class Score:
    name: str
    passed: bool
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


def _contains(text: str, want: Any) -> Score:
    wanted = [want] if isinstance(want, str) else list(want)
    missing = [w for w in wanted if w not in text]
    return Score("contains", not missing, f"missing {missing!r}" if missing else "")


def _regex(text: str, pattern: str) -> Score:
    if len(pattern) > MAX_PATTERN:
        return Score("regex", False, f"pattern longer than {MAX_PATTERN} characters")
    try:
        found = regex.search(pattern, text, timeout=REGEX_SECONDS)
    except regex.error as exc:
        return Score("regex", False, f"bad pattern: {exc}")
    except TimeoutError:
        return Score("regex", False, f"the pattern ran longer than {REGEX_SECONDS} s (catastrophic backtracking)")
    return Score("regex", found is not None, "" if found else f"no match for {pattern!r}")


def subset(want: Any, got: Any) -> bool:
    """``want`` is in ``got``: a dict's keys with matching values (recursively), else equal."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and subset(v, got[k]) for k, v in want.items())
    return bool(want == got)


def _tool_calls(calls: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> Score:
    at = 0
    for want in wanted:
        while at < len(calls) and not (
            calls[at].get("name") == want.get("name") and subset(want.get("input", {}), calls[at].get("input"))
        ):
            at += 1
        if at == len(calls):
            got = [f"{c.get('name')}({json.dumps(c.get('input'), sort_keys=True)})" for c in calls]
            return Score("tool_calls", False, f"no call {want.get('name')} matching {want.get('input', {})}; got {got}")
        at += 1
    return Score("tool_calls", True)


def _json_schema(text: str, schema: dict[str, Any]) -> Score:
    try:
        jsonschema.validate(json.loads(text), schema)
    except json.JSONDecodeError as exc:
        return Score("json_schema", False, f"not JSON: {exc}")
    except jsonschema.ValidationError as exc:
        return Score("json_schema", False, exc.message)
    except jsonschema.SchemaError as exc:
        return Score("json_schema", False, f"bad schema: {exc.message}")
    return Score("json_schema", True)


def _bound(name: str, value: float | None, limit: Any) -> Score:
    if value is None:
        return Score(name, False, "not known")
    return Score(name, value <= float(limit), f"{value:.6g} > {limit}" if value > float(limit) else "")


#: the statuses a turn may end in (``status``: what a case expects)
STATUSES = ("completed", "suspended", "failed", "cancelled")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _strings(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _calls(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and set(c) <= {"name", "input"} for c in value
    )


def _pattern(value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_PATTERN:
        return f"a pattern of at most {MAX_PATTERN} characters"
    try:
        regex.compile(value)
    except regex.error as exc:
        return f"bad pattern: {exc}"
    return ""


def _schema(value: Any) -> str:
    if not isinstance(value, dict):
        return "a JSON schema (an object)"
    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except jsonschema.SchemaError as exc:
        return f"bad schema: {exc.message}"
    return ""


#: each key of ``expect`` -> what is wrong with its value ("" when nothing is)
CHECKS: dict[str, Callable[[Any], str]] = {
    "status": lambda v: "" if v in STATUSES else f"one of {', '.join(STATUSES)}",
    "equals": lambda v: "" if isinstance(v, str) else "a string",
    "contains": lambda v: "" if _strings(v) else "a string or a list of strings",
    "regex": _pattern,
    "tool_calls": lambda v: "" if _calls(v) else 'a list of {"name": "...", "input"?: {...}}',
    "json_schema": _schema,
    "max_cost": lambda v: "" if _number(v) else "a number (US dollars)",
    "max_latency": lambda v: "" if _number(v) else "a number (seconds)",
    "max_tokens": lambda v: "" if _number(v) else "a number (input + output tokens)",
    "judge": lambda v: "" if isinstance(v, dict) and isinstance(v.get("prompt"), str) else '{"prompt": "..."}',
    "reference": lambda v: "" if isinstance(v, str) else "a string (the answer a judge compares with)",
}


def expect_problems(expect: Any) -> list[str]:
    """What is wrong with a case's ``expect``, one line each (none: every key is known and well
    formed). A key misspelt would otherwise be no expectation at all, and the case pass."""
    if not isinstance(expect, dict):
        return ["'expect' is an object"]
    out = []
    for key, value in expect.items():
        check = CHECKS.get(key)
        if check is None:
            close = difflib.get_close_matches(key, CHECKS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(CHECKS)})"
            out.append(f"unknown expectation {key!r}{hint}")
        elif problem := check(value):
            out.append(f"{key}: {problem}")
    return out


def score(
    expect: dict[str, Any], outcome: dict[str, Any], *, judge: Callable[[str, dict[str, Any]], Score] | None = None
) -> list[Score]:
    """Every score ``expect`` asks for, of ``outcome`` (``status``, ``text``, ``tool_calls``,
    ``usage``, ``cost``, ``latency``). ``judge`` answers a ``judge`` expectation. An ``expect``
    that is not well formed (a row stored before it was checked) fails its case, saying why,
    rather than raise in the process that scores it (a run would never finish)."""
    if problems := expect_problems(expect):
        return [Score("expect", False, "; ".join(problems))]
    text = outcome.get("text") or ""
    usage = outcome.get("usage") or {}
    want_status = expect.get("status", "completed")
    error = (outcome.get("error") or {}).get("message") if isinstance(outcome.get("error"), dict) else None
    said = f"{outcome.get('status')}, not {want_status}" + (f": {str(error)[:2000]}" if error else "")
    out = [Score("status", outcome.get("status") == want_status, said)]
    if out[0].passed:
        out[0] = Score("status", True)
    if "equals" in expect:
        out.append(Score("equals", text == expect["equals"], "" if text == expect["equals"] else f"got {text[:200]!r}"))
    if "contains" in expect:
        out.append(_contains(text, expect["contains"]))
    if "regex" in expect:
        out.append(_regex(text, str(expect["regex"])))
    if "tool_calls" in expect:
        out.append(_tool_calls(outcome.get("tool_calls") or [], list(expect["tool_calls"])))
    if "json_schema" in expect:
        out.append(_json_schema(text, expect["json_schema"]))
    if "max_cost" in expect:
        out.append(_bound("max_cost", outcome.get("cost"), expect["max_cost"]))
    if "max_latency" in expect:
        out.append(_bound("max_latency", outcome.get("latency"), expect["max_latency"]))
    if "max_tokens" in expect:
        tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        out.append(_bound("max_tokens", float(tokens), expect["max_tokens"]))
    if "judge" in expect:
        if judge is None:
            out.append(Score("judge", False, "no judge to ask"))
        else:
            out.append(judge(str((expect["judge"] or {}).get("prompt") or ""), outcome))
    return out
