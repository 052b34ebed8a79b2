"""Versions of an agent for an eval (june_evals/agent_versions.py): a scripted model named by the run,
and an agent folder at a git revision of a temporary repository, each run as real turns through
the site's services and the workers' task (driven in this process here; on django-q2 workers in
``test_eval_workers.py``); a version is no agent a person can reach."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents_app.runtime.errors import NotFound
from june_evals import agent_versions, driver
from june_evals.models import AgentVersion, Dataset, EvalCase, Example
from sessions_app import access, wiring
from sessions_app import models as m
from sessions_app.site_errors import BadRequest
from tests.integration.test_evals import drive_here

pytestmark = pytest.mark.django_db(transaction=True)

TOOL = """from agents_app.runtime import tool


@tool("version", "Which version this is.", {"type": "object", "properties": {}})
def version(input, ctx):
    return "{v}"
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def write_clerk(repo: Path, v: str) -> None:
    folder = repo / "agents" / "clerk"
    (folder / "tools").mkdir(parents=True, exist_ok=True)
    (folder / "instructions.md").write_text(f"You are the clerk, {v}.\n")
    (folder / "tools" / "version.py").write_text(TOOL.replace("{v}", v))


@pytest.fixture
def clerk_repo(tmp_path, settings):
    """A repository whose agent ``clerk`` is at v1 in HEAD~1 and v2 in HEAD (and on disk)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    write_clerk(repo, "v1")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "clerk v1")
    write_clerk(repo, "v2")
    git(repo, "commit", "-qam", "clerk v2")
    settings.JUNE_AGENT_DIRS = [str(repo / "agents")]
    settings.JUNE_VAR_DIR = str(tmp_path / "var")
    wiring.agents.cache_clear()
    yield repo
    wiring.agents.cache_clear()
    for name in [n for n in sys.modules if n.startswith(("june_agents.clerk", "june_version_"))]:
        del sys.modules[name]


def one_case(text: str = "which version?", **expect) -> Dataset:
    dataset = Dataset.objects.create(name=f"versions {text}")
    Example.objects.create(dataset=dataset, name="one", input=text, expect=expect)
    return dataset


def test_b_is_the_agent_folder_at_a_git_revision(clerk_repo):
    script = "script:tests.integration.eval_scripts:version_then_echo"
    a = driver.version("clerk", label="A", model=script)
    b = driver.version("clerk", label="B", git="HEAD~1", model=script)
    assert a["runs_as"] != b["runs_as"] and b["runs_as"].startswith("clerk@")
    row = AgentVersion.objects.get(name=b["runs_as"])
    assert (row.rev, row.folder, len(row.sha)) == ("HEAD~1", "agents/clerk", 40)
    assert "at HEAD~1" in b["about"]
    # the same version asked again is the same row
    assert driver.version("clerk", git="HEAD~1", model=script)["runs_as"] == b["runs_as"]

    run = driver.run_start(dataset=one_case(contains="v2"), versions=[a, b])
    drive_here(run)
    cases = {c.version: c for c in EvalCase.objects.filter(run=run)}
    # A ran the folder on disk (v2), B the revision's files: its tool module and its instructions
    assert cases[0].text == "v2 | You are the clerk, v2."
    assert cases[1].text == "v1 | You are the clerk, v1."
    assert (cases[0].passed, cases[1].passed) == (True, False)
    assert m.Turn.objects.get(pk=cases[1].turn_id).session.agent == b["runs_as"]
    # the site's clerk kept its own modules: the revision's were loaded beside them
    site = Path(sys.modules["june_agents.clerk.tools.version"].__file__)
    package = f"june_version_{b['runs_as'].rpartition('@')[2]}"  # B's own (another test's may be loaded too)
    [revision] = [mod for name, mod in sys.modules.items() if name.startswith(package) and "tools" in name]
    assert site.parent.parent == clerk_repo / "agents" / "clerk"
    assert Path(revision.__file__).is_relative_to(Path(clerk_repo.parent / "var" / "eval-agents"))


def test_a_revision_without_the_folder_or_a_bad_revision_is_refused(clerk_repo):
    with pytest.raises(
        BadRequest, match=r"^no git revision 'no-such-branch' in .*repo \(the repository of clerk's folder\)$"
    ):
        driver.version("clerk", git="no-such-branch")
    with pytest.raises(BadRequest, match="not a git revision"):
        driver.version("clerk", git="--output=/tmp/x")
    git(clerk_repo, "mv", "agents/clerk", "agents/clerk2")
    git(clerk_repo, "commit", "-qm", "moved")
    git(clerk_repo, "mv", "agents/clerk2", "agents/clerk")
    git(clerk_repo, "commit", "-qm", "back")
    with pytest.raises(BadRequest, match="not in revision HEAD~1"):
        driver.version("clerk", git="HEAD~1")


def test_an_agent_folder_outside_any_repository_says_so(clerk_repo):
    import shutil

    shutil.rmtree(clerk_repo / ".git")
    with pytest.raises(BadRequest, match=r"^clerk's folder .* is in no git repository \(git rev-parse: fatal"):
        driver.version("clerk", git="HEAD")


def test_a_scripted_model_from_a_file_and_no_person_reaches_a_version(tmp_path):
    replies = [{"tool_calls": [{"name": "create_order", "input": {"item": "mugs", "quantity": 2}}]}, "Ordered 2 mugs."]
    script = tmp_path / "order.json"
    script.write_text(json.dumps(replies))
    v = driver.version("ops", model=f"script:{script}")
    script.unlink()  # the replies are kept with the version: the workers never read the file
    dataset = one_case(
        "order 2 mugs", equals="Ordered 2 mugs.", tool_calls=[{"name": "create_order", "input": {"quantity": 2}}]
    )
    run = driver.run_start(dataset=dataset, versions=[v])
    drive_here(run)
    [case] = EvalCase.objects.filter(run=run)
    assert case.passed, case.scores
    # an eval's version is run by its eval only: the chat, the API, the websockets refuse it
    with pytest.raises(NotFound):
        access.session_for_user(agent=v["runs_as"], key="mine", user=None, create=True)
    assert v["runs_as"] not in wiring.agents()  # nor is it listed


def test_no_page_api_or_webhook_reaches_a_version(tmp_path, client):
    from django.contrib.auth import get_user_model
    from django.urls import reverse

    script = tmp_path / "hi.json"
    script.write_text('["hi"]')
    name = driver.version("ops", model=f"script:{script}")["runs_as"]
    client.force_login(get_user_model().objects.create_user("ann", password="pw"))
    assert client.post(reverse("sessions_app:session-new", kwargs={"agent": name})).status_code == 404
    assert client.get(reverse("june_api:sessions", kwargs={"agent": name})).status_code == 404
    assert client.post(reverse("june_webhooks:agent-webhook", kwargs={"agent": name}), {}).status_code == 404
    # the agent itself still answers (the refusals are the version's, not the route's)
    assert client.get(reverse("june_api:sessions", kwargs={"agent": "ops"})).status_code == 200
    # staff read the versions the runs made; nobody edits one
    client.force_login(get_user_model().objects.create_user("staff", password="pw", is_staff=True))
    listing = client.get("/admin/june_evals/agentversion/")
    assert (
        listing.status_code == 200 and name.encode() in listing.content and b"model script hi.json" in listing.content
    )
    assert client.get("/admin/june_evals/agentversion/add/").status_code == 403


@pytest.mark.parametrize(
    "spec, error",
    [
        ("gpt:x", "a model is cassette:FILE"),
        ("script:/nonexistent.json", "cannot read"),
        ("script:tests.integration.eval_scripts:nothing", "no script function"),
        ("cassette:/nonexistent.json", "cannot read"),
    ],
)
def test_a_bad_model_is_refused_when_the_run_starts(spec, error):
    with pytest.raises(BadRequest, match=error):
        agent_versions.model_spec(spec)


def test_the_admin_names_no_function_and_no_file_outside_the_project(tmp_path):
    outside = tmp_path / "replies.json"
    outside.write_text('["hi"]')
    assert agent_versions.model_spec(f"script:{outside}") == {"script": "replies.json", "replies": ["hi"]}
    with pytest.raises(BadRequest, match="project's folder or JUNE_VAR_DIR only"):
        agent_versions.model_spec(f"script:{outside}", web=True)
    with pytest.raises(BadRequest, match="on the command line"):
        agent_versions.model_spec("script:tests.integration.eval_scripts:version_then_echo", web=True)


def test_the_command_reads_against_as_an_agent_a_revision_or_both(clerk_repo):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from june_evals.evalcli import against

    assert against("git:HEAD~1", "clerk") == ("clerk", "HEAD~1")
    assert against("ops@git:v2", "clerk") == ("ops", "v2")
    assert against("ops", "clerk") == ("ops", None)
    assert against(None, "clerk") == ("clerk", None)
    for bad in ("git:", "ops:git:x"):
        with pytest.raises(CommandError, match="git:REV or NAME@git:REV"):
            against(bad, "clerk")
    dataset = clerk_repo.parent / "cases.jsonl"
    dataset.write_text('{"input": "which version?"}\n')
    with pytest.raises(CommandError, match="no git revision .no-such-rev. in"):
        call_command("june", "eval", str(dataset), "--agent", "clerk", "--against", "git:no-such-rev")
    with pytest.raises(CommandError, match="a model is cassette:FILE"):
        call_command("june", "eval", str(dataset), "--agent", "clerk", "--model", "gpt-9")


def test_a_recorded_or_scripted_version_is_judged_by_its_agent_s_model(tmp_path):
    """docs/evals.md: the judge is the agent's model as the site configures it, never the
    version's cassette or script (which replays the agent's answers, not a judge's: a question
    it never recorded). Here the agent's model is the demo one, which echoes; the script, asked,
    would have said PASS."""
    script = tmp_path / "says_pass.json"
    script.write_text(json.dumps(["PASS, surely.", "PASS, surely."]))
    v = driver.version("ops", model=f"script:{script}", judge=True)
    dataset = one_case("hello", judge={"prompt": "Is it polite?"})
    run = driver.run_start(dataset=dataset, versions=[v])
    drive_here(run)
    [case] = EvalCase.objects.filter(run=run)
    [verdict] = [s for s in case.scores if s["name"] == "judge"]
    assert case.text == "PASS, surely."  # the version's answer: the script's
    assert verdict["detail"].startswith("You said: Input:")  # the judge's: the ops agent's demo model
