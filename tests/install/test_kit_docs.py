"""docs/testing.md and docs/evals.md, executed as an agent author new to June follows them: the
project docs/install.md builds (its blocks, in order), then each page's ``<!-- june-host: … -->``
blocks applied to it in order — the pytest configuration and the example test file, ``pytest``
and ``pytest --june-record`` in the project's folder with June's plugin from its entry point; the
evals' app added to the settings, a dataset for the clerk, ``manage.py june eval`` on the page's
two processes.

It pins what such an author hit: the testing page's example written for June's own host project
(``from hostproject.shop.models import …``, a ``turn_id`` column install.md's ``Purchase`` does
not have, another prompt), a pytest configuration naming ``hostproject.settings``, and the evals
page's first command answering ``invalid choice: 'eval'`` (``june_evals`` is in no
``INSTALLED_APPS`` the pages had said to write) with a dataset and an agent only June's own
repository has."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import pytest

from tests.install import page
from tests.install.conftest import on_postgres
from tests.install.host import Host

# a project built, two pytest runs in it, its processes started: a minute or two on a loaded machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DOCS = Path(__file__).resolve().parents[2] / "docs"


def apply(host: Host, doc: Path, before_run: Callable[[page.Block], None] = lambda block: None) -> list[str]:
    """Every ``june-host`` block of ``doc`` on ``host``'s project, in order; each command's output."""
    outputs = []
    for block in page.blocks(doc.read_text(), marker="june-host"):
        if block.action != "run":
            host.write(block)
            continue
        before_run(block)
        status = int(block.tag.removeprefix("exits ")) if block.tag else 0
        outputs.append(host.run(host.text(block), timed=False, status=status))
    return outputs


def passed(output: str) -> int:
    found = re.search(r"(\d+) passed", output)
    assert found and " failed" not in output and " error" not in output, output[-3000:]
    return int(found[1])


def test_the_testing_and_evals_pages_run_in_the_install_pages_project(host_database):
    host = Host(tags={"postgres"} if on_postgres() else set(), database_url=host_database)
    try:
        host.build()

        # docs/testing.md: the example, then the whole file once its cassette is recorded
        first, recorded_then_replayed = apply(host, DOCS / "testing.md")
        assert passed(first) == 1
        assert re.findall(r"\b(\d+) passed", recorded_then_replayed) == ["5", "5"], recorded_then_replayed[-3000:]
        assert " failed" not in recorded_then_replayed
        [cassette] = (host.cwd / "shop" / "cassettes" / "tests").glob("*.json")
        assert cassette.name == "test_the_clerk_answers_as_its_recorded_model_did.json"
        assert json.loads(cassette.read_text())["interactions"]

        # docs/evals.md: the app added, then the page's commands on the page's processes
        def processes(block: page.Block) -> None:
            if "june eval" in block.text and not host.procs:
                host.start()

        _, as_is, against = apply(host, DOCS / "evals.md", before_run=processes)
        assert "pass [A] order mugs" in as_is and "[A] 2/2 passed (100%)" in as_is, as_is
        said = "FAIL [B] order mugs — tool_calls: no call create_order matching {'quantity': 2}; got []"
        assert said in against and "[A] 2/2 passed (100%)" in against, against
        assert said in (DOCS / "evals.md").read_text()  # the page quotes what the command says
    except BaseException:
        print(host.logs())
        raise
    finally:
        host.stop()
