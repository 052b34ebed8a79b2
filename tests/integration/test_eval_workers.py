"""An eval's versions on real django-q2 workers: ``manage.py june eval`` with A's model a
cassette (recorded here through ``june.testing`` from the demo model; its tools' results
the same at each run, as a replayed request must be) and B's a script, the
workers started with ``JUNE_MODEL=demo`` — each version's turns are answered by its own model
there, named durably by the run (an ``AgentVersion``), not by the worker's settings; a case the
cassette never recorded fails with the cassette's diff."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from june.testing.tester import JuneTester
from june_evals.models import EvalCase
from sessions_app import models as m

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CASES = [
    {"name": "hello", "input": "hello", "expect": {"equals": "You said: hello"}},
    {
        "name": "stock",
        "input": "stock tea",
        "expect": {"tool_calls": [{"name": "lookup_stock", "input": {"item": "tea"}}]},
    },
    {"name": "unrecorded", "input": "what is new?"},
]
SCRIPT = [{"tool_calls": [{"name": "lookup_stock", "input": {"item": "tea"}}]}, "Looked it up."]


def test_a_cassette_and_a_script_answer_on_the_workers(clusters, tmp_path, settings):
    settings.JUNE_MODEL = "demo"  # the recording's model: the offline demo
    tester = JuneTester(cassettes=tmp_path, record=True, name="ops")
    cassette = tester.cassette()
    for n, case in enumerate(CASES[:2]):
        assert tester.run("ops", case["input"], model=cassette, session=f"rec-{n}", source="eval").status == "completed"
    dataset = tmp_path / "versions.jsonl"
    dataset.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))

    clusters.start(JUNE_MODEL="demo")
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit:
        call_command(
            "june", "eval", str(dataset), "--agent", "ops", "--model", f"cassette:{tmp_path / 'ops.json'}",
            "--against", "ops", "--against-model", f"script:{script}", "--timeout", "90", "--json", stdout=out,
        )  # fmt: skip
    assert exit.value.code == 1, out.getvalue()  # neither version passes every case
    totals = json.loads(out.getvalue().splitlines()[-1])
    assert [(t["label"], t["passed"]) for t in totals["versions"]] == [("A", 2), ("B", 2)]

    cases = {
        (c.example.name, c.version): c for c in EvalCase.objects.filter(run=totals["run"]).select_related("example")
    }
    # A: the cassette's recorded demo answers; a request it never saw fails its turn, with the diff
    assert cases["hello", 0].text == "You said: hello" and cases["stock", 0].passed
    unrecorded = cases["unrecorded", 0]
    assert unrecorded.status == "failed" and not unrecorded.passed
    assert "is not in cassette ops.json" in unrecorded.scores[0]["detail"]
    assert "message 0 (user) changed" in unrecorded.scores[0]["detail"]
    # B: the script's replies, though the workers' JUNE_MODEL is the demo's (which says "You said")
    assert cases["hello", 1].text == "Looked it up." and not cases["hello", 1].passed
    assert cases["stock", 1].passed and cases["unrecorded", 1].passed
    turns = m.Turn.objects.filter(pk__in=[c.turn_id for c in cases.values()]).select_related("session")
    assert {t.session.agent.partition("@")[0] for t in turns} == {"ops"}
    assert len({t.session.agent for t in turns}) == 2  # each version ran as its own name
