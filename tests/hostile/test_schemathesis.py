"""The OpenAPI document against the server: Schemathesis generates requests from
``/api/openapi.json`` (valid ones and ones the document says are invalid) and runs every check
(the CLI's ``--checks all``) on each answer: no 5xx, only documented statuses, content types
and headers, bodies that match their schemas (SSE events one by one), valid data accepted,
invalid data refused, auth not ignored, wrong methods answered 405 with ``Allow``.

Against a real daphne on the test database (no worker: turns stay queued; waits and streams
are bounded short), with a bearer token. Its log must hold no traceback afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings

from sessions_app import models as m
from sessions_app.web.openapi import SESSION_PATH, document
from tests.fault.qcluster import database_url, free_port

from .support import ACCEPTED, CASES, SERVER_ERRORS, STATUSES, make_user

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 90.0
EXAMPLES = int(os.environ.get("JUNE_SCHEMATHESIS_EXAMPLES", "10"))
#: the document's statuses for a request it calls invalid: also 413 (text over JUNE_MAX_TEXT_CHARS)
REJECTED = ["400", "401", "403", "404", "405", "409", "413", "415", "422"]
#: schemathesis's statuses for a request it calls valid, and 413: a text within maxLength may still
#: not fit the agent's model context window (the agent is a path parameter: the document cannot
#: give each agent's limit; the 413 says it, code context_window_exceeded)
ACCEPTED_OR_TOO_LONG = ["2xx", "3xx", "401", "403", "404", "409", "413", "429", "5xx"]
#: and 422 where a fork point is named: a position the schema admits may not be a message a person
#: sent to open a turn (code not_a_fork_point), which only the session's contents say
ACCEPTED_OR_NOT_A_FORK_POINT = [*ACCEPTED_OR_TOO_LONG, "422"]
#: and 415 where files go: their type is sniffed from their bytes, which a schema cannot say, so
#: schema-valid random bytes are refused (README "Attachments")
ACCEPTED_OR_NOT_A_FILE_WE_TAKE = [*ACCEPTED_OR_TOO_LONG, "415"]
#: and 400, 415, 422 where a front-end protocol's message goes (AI SDK UI messages, AG-UI's
#: RunAgentInput): their parts are the protocols' own, which the document outlines and the
#: server validates (a last message with no text, a part that is not one, a file of a type we
#: do not take, an answer the question's schema refuses)
ACCEPTED_OR_NOT_A_MESSAGE = [*ACCEPTED_OR_TOO_LONG, "400", "415", "422"]


@pytest.fixture(scope="module")
def daphne(django_db_setup, django_db_blocker, tmp_path_factory):
    """daphne alone on the test database; yields (base URL, its log file)."""
    with django_db_blocker.unblock():
        db_url = database_url()
    log_path = tmp_path_factory.mktemp("schemathesis") / "daphne.log"
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "JUNE_MODEL", "PYTEST_CURRENT_TEST")}
    env.update(
        DATABASE_URL=db_url,
        SECRET_KEY=settings.SECRET_KEY,
        DJANGO_SETTINGS_MODULE="june_project.settings",
        DEBUG="0",
        JUNE_Q_SYNC="0",
        JUNE_Q_NAME=settings.Q_CLUSTER["name"],
        JUNE_API_WAIT_SECONDS="0.2",
        JUNE_API_STREAM_SECONDS="0.5",
        JUNE_SSE_POLL_SECONDS="0.1",
        LOG_LEVEL="WARNING",
        JUNE_RATE_TURNS_PER_MINUTE="0",  # one user's hundreds of POSTs
        MEDIA_ROOT=str(log_path.parent / "media"),
    )  # its uploads (attachments) stay in the run's folder
    port = free_port()
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE
    try:
        while True:
            try:
                if httpx.get(url + "/api/openapi.json", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)  # polling for the server to listen
        yield url, log_path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)
        log.close()
    text = log_path.read_text(errors="replace")
    assert "Traceback" not in text and " 500 " not in text, text[-3000:]


CONFIG = f"""
[generation]
database = "none"

[checks.negative_data_rejection]
expected-statuses = {REJECTED!r}

[checks.positive_data_acceptance]
expected-statuses = {ACCEPTED_OR_TOO_LONG!r}

[[operations]]
include-operation-id = ["uploadAttachment", "startTurn"]
checks.positive_data_acceptance.expected-statuses = {ACCEPTED_OR_NOT_A_FILE_WE_TAKE!r}

[[operations]]
include-operation-id = ["uiChat", "aguiRun"]
checks.positive_data_acceptance.expected-statuses = {ACCEPTED_OR_NOT_A_MESSAGE!r}

[[operations]]
include-operation-id = ["forkAtMessage"]
checks.positive_data_acceptance.expected-statuses = {ACCEPTED_OR_NOT_A_FORK_POINT!r}
"""


def test_the_server_does_what_its_document_says(daphne, tmp_path):
    """``schemathesis run --checks all`` (examples, coverage and fuzzing phases, valid and
    invalid data) over every operation of the document, authenticated with a token."""
    url, _ = daphne
    token = m.ApiToken.issue(make_user("schemathesis"), name="schemathesis")[1]
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    report = tmp_path / "requests.har"
    cli = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        url + "/api/openapi.json",
        "--checks",
        "all",
        "--mode",
        "all",
        "--max-examples",
        str(EXAMPLES),
        "--workers",
        "1",
        "--phases",
        "examples,coverage,fuzzing",
        "-H",
        f"Authorization: Bearer {token}",
        "--request-timeout",
        "30",
        "--seed",
        os.environ.get("JUNE_SCHEMATHESIS_SEED", "13"),
        "--no-color",
        "--report",
        "har",
        "--report-har-path",
        str(report),
    ]
    run = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    (Path(os.environ.get("JUNE_SCHEMATHESIS_OUT", str(tmp_path))) / "schemathesis.out").write_text(
        run.stdout + run.stderr
    )
    assert run.returncode == 0, run.stdout[-12000:] + run.stderr[-3000:]
    _count(report)


def _count(har: Path) -> None:
    """Every request the run sent (its HAR record), per operation and status, into the closing
    note; a 5xx would have failed the run already (``not_a_server_error``), this shows it too."""
    import json
    import re

    paths = document()["paths"]
    templates = [
        (re.compile("^" + re.sub(r"\\{\w+\\}", "[^/]*", re.escape(path)) + "$"), path)
        for path in sorted(paths, key=len, reverse=True)
    ]
    for entry in json.loads(har.read_text())["log"]["entries"]:
        path = urlsplit(entry["request"]["url"]).path
        template = next((t for rx, t in templates if rx.match(path)), "(other)")
        method = entry["request"]["method"]
        if method.lower() in paths.get(template, {}):
            endpoint = f"schemathesis {method} {template.removeprefix(SESSION_PATH)}"
        else:
            endpoint = "schemathesis undocumented methods"
        status = int(entry["response"]["status"])
        CASES[endpoint] += 1
        STATUSES[endpoint, status] += 1
        ACCEPTED[endpoint] += 200 <= status < 300
        SERVER_ERRORS[endpoint] += status >= 500
