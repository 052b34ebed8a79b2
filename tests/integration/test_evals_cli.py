"""``manage.py june eval`` against real workers (a qcluster process): the demo dataset passes on
the ops agent (exit 0); against the demo's changed instructions, B fails the ordering case and
the command exits 1 under the default threshold; the totals are printed as JSON for CI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from june_evals import driver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
DEMO = Path(driver.__file__).parent / "demo"


def june_eval(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("june", "eval", *args, stdout=out, stderr=err)
    except SystemExit as exit:
        return int(exit.code or 0), out.getvalue() + err.getvalue()
    return 0, out.getvalue() + err.getvalue()


def test_the_demo_dataset_through_the_command_on_workers(clusters):
    clusters.start()
    code, out = june_eval(str(DEMO / "ops.jsonl"), "--agent", "ops", "--timeout", "60")
    assert code == 0, out
    assert "[A] 6/6 passed (100%)" in out

    code, out = june_eval(
        str(DEMO / "ops.jsonl"),
        "--agent",
        "ops",
        "--against-instructions",
        str(DEMO / "ops_ask_first.md"),
        "--timeout",
        "60",
        "--json",
    )
    assert code == 1, out
    report = json.loads(out)  # the whole output: one object, for CI's jq
    assert [(t["label"], t["passed"]) for t in report["versions"]] == [("A", 6), ("B", 5)]
    [failed] = [c for c in report["cases"] if not c["passed"]]
    assert (failed["version"], failed["name"]) == ("B", "order mugs")
    assert failed["failed"].startswith("contains: missing ['create_order']; tool_calls: no call create_order")

    code, out = june_eval(
        "ops", "--agent", "ops", "--against-instructions", str(DEMO / "ops_ask_first.md"), "--threshold", "0.8"
    )
    assert code == 0, out  # the dataset by its name now; 5/6 clears 0.8

    # docs/evals.md: the folder on disk against the same folder as last committed (an agent
    # version the workers load from its row)
    code, out = june_eval(str(DEMO / "ops.jsonl"), "--agent", "ops", "--against", "git:HEAD", "--timeout", "60")
    assert code == 0, out
    assert "[A] 6/6 passed (100%)" in out and "[B] 6/6 passed (100%)" in out


def test_bad_arguments_are_command_errors():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no dataset named"):
        call_command("june", "eval", "nothing-here", "--agent", "ops")
    with pytest.raises(CommandError, match="no agent named"):
        call_command("june", "eval", str(DEMO / "ops.jsonl"), "--agent", "nobody")
    with pytest.raises(CommandError, match="between 0 and 1"):
        call_command("june", "eval", str(DEMO / "ops.jsonl"), "--agent", "ops", "--threshold", "2")
