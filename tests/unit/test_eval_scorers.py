"""The evals' scorers (june_evals/scorers.py), by table: pure functions of the expectations and
what a turn did."""

from __future__ import annotations

import pytest

from june_evals.scorers import Score, expect_problems, score, subset

DONE = {
    "status": "completed",
    "text": '{"total": 3}',
    "tool_calls": [
        {"name": "lookup_stock", "input": {"item": "tea"}},
        {"name": "create_order", "input": {"item": "mugs", "quantity": 2, "note": "gift"}},
    ],
    "usage": {"input_tokens": 100, "output_tokens": 20},
    "cost": 0.002,
    "latency": 1.5,
}


def failed(expect: dict, outcome: dict = DONE) -> list[str]:
    return [s.name for s in score(expect, outcome) if not s.passed]


@pytest.mark.parametrize(
    "expect, fails",
    [
        ({}, []),
        ({"equals": '{"total": 3}'}, []),
        ({"equals": "3"}, ["equals"]),
        ({"contains": "total"}, []),
        ({"contains": ["total", "missing"]}, ["contains"]),
        ({"regex": r"\d+\}$"}, []),
        ({"regex": r"^nope"}, ["regex"]),
        ({"regex": "("}, ["expect"]),  # refused where it is typed; a stored one fails its case
        ({"regex": "a" * 501}, ["expect"]),
        ({"tool_calls": [{"name": "create_order", "input": {"quantity": 2}}]}, []),
        ({"tool_calls": [{"name": "lookup_stock"}, {"name": "create_order"}]}, []),
        ({"tool_calls": [{"name": "create_order"}, {"name": "lookup_stock"}]}, ["tool_calls"]),  # order
        ({"tool_calls": [{"name": "create_order", "input": {"quantity": 3}}]}, ["tool_calls"]),
        ({"json_schema": {"type": "object", "required": ["total"]}}, []),
        ({"json_schema": {"type": "object", "required": ["count"]}}, ["json_schema"]),
        ({"max_cost": 0.01, "max_latency": 2, "max_tokens": 120}, []),
        ({"max_cost": 0.001, "max_latency": 1, "max_tokens": 119}, ["max_cost", "max_latency", "max_tokens"]),
        ({"status": "suspended"}, ["status"]),
        ({"judge": {"prompt": "polite?"}}, ["judge"]),  # no judge given: fails, says so
    ],
)
def test_each_expectation(expect, fails):
    assert failed(expect) == fails


def test_a_failed_turn_fails_its_status_and_a_missing_cost_fails_its_bound():
    assert failed({"max_cost": 1}, {**DONE, "status": "failed", "cost": None}) == ["status", "max_cost"]
    assert failed({"json_schema": {"type": "object"}}, {**DONE, "text": "not json"}) == ["json_schema"]


def test_the_judge_is_asked_with_the_datasets_prompt():
    asked = []

    def judge(prompt, outcome):
        asked.append((prompt, outcome["text"]))
        return Score("judge", True, "PASS: fine")

    assert failed({"judge": {"prompt": "Is it a total?"}}, DONE) == ["judge"]
    scores = score({"judge": {"prompt": "Is it a total?"}}, DONE, judge=judge)
    assert all(s.passed for s in scores) and asked == [("Is it a total?", '{"total": 3}')]


def test_subset():
    assert subset({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": 3})
    assert not subset({"a": {"b": 1}}, {"a": {"b": 2}})
    assert not subset({"a": 1}, None)


def test_a_catastrophic_pattern_gives_up_in_bounded_time():
    # Python's ``re`` backtracks for hours on this pattern against 60 a's and a b (2^60 ways to
    # split the a's); the scorer's matcher stops at its time limit and fails the case, saying why
    import time

    from june_evals.scorers import REGEX_SECONDS

    started = time.monotonic()
    [verdict] = [s for s in score({"regex": "(a|aa)+$"}, {**DONE, "text": "a" * 60 + "b"}) if s.name == "regex"]
    assert not verdict.passed and "longer than" in verdict.detail
    assert time.monotonic() - started < REGEX_SECONDS + 5  # the limit, not the pattern's hours
    # a pattern the engine can answer still matches as Python's would
    assert failed({"regex": r"(?i)^\{\"TOTAL\": (\d)\}$"}) == []


@pytest.mark.parametrize(
    "expect, problem",
    [
        ({"contain": "hello"}, "unknown expectation 'contain' (did you mean 'contains'?)"),
        ({"tool_call": []}, "unknown expectation 'tool_call' (did you mean 'tool_calls'?)"),
        ({"zzz": 1}, "unknown expectation 'zzz' (known: status, equals"),
        ({"tool_calls": "create_order"}, 'tool_calls: a list of {"name": "...", "input"?: {...}}'),
        ({"tool_calls": [{"name": "a", "inputs": {}}]}, "tool_calls: a list of"),
        ({"max_cost": "cheap"}, "max_cost: a number (US dollars)"),
        ({"max_tokens": -1}, "max_tokens: a number"),
        ({"max_latency": True}, "max_latency: a number (seconds)"),
        ({"regex": "(unclosed"}, "regex: bad pattern: missing )"),
        ({"json_schema": {"type": "nonsense"}}, "json_schema: bad schema: 'nonsense' is not valid"),
        ({"json_schema": "object"}, "json_schema: a JSON schema (an object)"),
        ({"status": "done"}, "status: one of completed, suspended, failed, cancelled"),
        ({"contains": ["a", 1]}, "contains: a string or a list of strings"),
        ({"equals": 3}, "equals: a string"),
        ({"judge": "polite?"}, 'judge: {"prompt": "..."}'),
        (["contains"], "'expect' is an object"),
    ],
)
def test_an_expectation_misspelt_or_malformed_is_named(expect, problem):
    [said] = expect_problems(expect)
    assert said.startswith(problem), said


def test_a_stored_malformed_expectation_fails_its_case_instead_of_raising():
    # rows typed before they were checked: the process that scores them must not raise, or
    # the run never finishes (the workers' tick dies on it each time)
    for expect in ({"tool_calls": "create_order"}, {"max_cost": "cheap"}, ["contains"], {"contain": "x"}):
        [verdict] = score(expect, DONE)  # type: ignore[arg-type]
        assert verdict.name == "expect" and not verdict.passed and verdict.detail


def test_every_documented_expectation_is_well_formed():
    assert (
        expect_problems(
            {
                "status": "suspended",
                "equals": "x",
                "contains": ["x", "y"],
                "regex": "^x",
                "tool_calls": [{"name": "create_order", "input": {"quantity": 2}}, {"name": "lookup_stock"}],
                "json_schema": {"type": "object"},
                "max_cost": 0.01,
                "max_latency": 2,
                "max_tokens": 120,
                "judge": {"prompt": "polite?"},
                "reference": "what was said then",
            }
        )
        == []
    )
