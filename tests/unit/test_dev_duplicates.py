"""``dev.py test``'s repeated-blocks check: which rows of a ``duplicates`` report fail it."""

from __future__ import annotations

import dev

REPORT = """\
5 pairs of places (600 files read), each sharing runs of 10 or more identical or same-shape lines
D1 sessions_app/a.py:10-24 ~ sessions_app/b.py:40-54
D2 sessions_app/a.py:30-41 ~ tests/unit/test_a.py:5-16
D3 agents_app/runtime/executor.py:48-58 ~ agents_app/runtime/loop.py:75-85 shape boilerplate
D4 sessions_app/site_errors.py:11-26 ~ agents_app/runtime/errors.py:70-91 shape (+3 more runs)
D5 sessions_app/migrations/0001_initial.py:1-20 ~ sessions_app/migrations/0002_x.py:1-20
"""


def test_a_pair_outside_tests_and_the_allowed_fails_the_check() -> None:
    assert dev.duplicates_found(REPORT) == ["D1 sessions_app/a.py:10-24 ~ sessions_app/b.py:40-54"]


def test_a_report_that_did_not_read_everything_fails_the_check() -> None:
    assert dev.duplicates_found("incomplete: time: 20 s") == ["incomplete: time: 20 s"]
