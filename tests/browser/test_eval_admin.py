"""The evals' admin in Chromium: a staff user starts a run of the demo dataset from its page —
A the ops agent, B the ops folder at the repository's HEAD with the demo's changed instructions
(an agent version the workers load from its row) — and reads the comparison the workers fill
in: each case's pass or FAIL per version, the answers' word diff, tokens, cost and latency, the
totals; the one case B breaks is highlighted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_a_staff_user_compares_two_versions_in_the_admin(june_server, new_page, make_user):
    from june_evals import driver
    from june_evals.datasets import dataset_load
    from june_evals.models import EvalRun

    demo = Path(driver.__file__).parent / "demo"
    dataset = dataset_load(path=demo / "ops.jsonl")
    staff = make_user("evaluator", staff=True)
    staff.is_superuser = True
    staff.save()
    page = new_page(staff)

    page.goto(f"/admin/june_evals/dataset/{dataset.pk}/change/")
    page.click("a.june-eval-run")
    page.select_option("#id_agent", "ops")
    page.fill("#id_against_instructions", (demo / "ops_ask_first.md").read_text())
    page.fill("#id_against_git", "HEAD")
    page.click("input[type=submit]")

    page.wait_for_url("**/admin/june_evals/evalrun/*/change/**")
    run = EvalRun.objects.get(dataset=dataset)
    assert "B: ops at HEAD (" in page.locator("#content-main p").first.text_content()
    # the page refreshes itself until the workers have run and scored every case
    totals = page.locator("#june-eval-totals tbody tr")
    page.wait_for_selector("#content-main p:has-text('— done')", timeout=120_000)
    a_total, b_total = (" ".join(" ".join(totals.nth(i).locator("td").all_text_contents()).split()) for i in range(2))
    tokens = r"\d+ \+ \d+ \$\d+\.\d{4} \d+\.\d\d s"  # tokens in + out, cost, mean latency
    assert re.fullmatch(rf"A 6 / 6 100 % 6 {tokens}", a_total), a_total
    assert re.fullmatch(rf"B 5 / 6 83 % 6 {tokens}", b_total), b_total
    a = driver.totals(run)[0]
    assert a_total.startswith(f"A 6 / 6 100 % 6 {a['input_tokens']} + {a['output_tokens']} ") and a["input_tokens"] > 0

    cases = page.locator("#june-eval-cases tbody tr")
    assert cases.count() == 6
    broken = page.locator("#june-eval-cases tbody tr.changed")
    assert broken.count() == 1  # the one case whose verdict differs, highlighted
    assert "order mugs" in broken.locator("td").nth(0).text_content()
    a_cell, b_cell, diff = (broken.locator("td").nth(i) for i in (1, 2, 3))
    assert a_cell.locator("span.pass").text_content() == "pass"
    assert b_cell.locator("span.fail").text_content() == "FAIL"
    assert "tool_calls: no call create_order" in b_cell.text_content()
    for cell in (a_cell, b_cell):  # tokens, cost and latency of each side
        meta = " ".join(cell.locator(".meta").first.text_content().split())
        assert "tokens" in meta and "$" in meta and meta.endswith(" s"), meta
    assert b_cell.locator(".answer").text_content().startswith("Shall I go ahead")
    assert diff.locator("del").count() >= 1 and diff.locator("ins").count() >= 1
    # the rows that agree show no highlight, and every verdict is on the page
    assert page.locator("#june-eval-cases span.pass").count() == 11
    assert page.locator("#june-eval-cases span.fail").count() == 1
    # and the export is one click away
    export = page.request.get(f"/admin/june_evals/evalrun/{run.pk}/export/?format=csv")
    assert export.status == 200 and export.text().count("\n") == 13
