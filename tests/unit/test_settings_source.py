"""One source for settings: ``june.settings`` reads the environment and fills Django's settings
with every ``JUNE_*`` a project does not set; every other module reads ``django.conf.settings``
(or is handed a value: the engine imports no Django). A module that read ``os.environ`` itself
ignored a host project's ``settings.JUNE_MCP_TIMEOUT``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: read the environment by design: the settings modules, the developer's and the benches' scripts
OWN = {"june/settings.py", "dev.py", "manage.py", "conftest.py"}
NOT_JUNE = {".venv", ".git", "node_modules", "var", "build", "dist", "tests", "bench", "june_project"}
READ = re.compile(r"\bos\.environ\b|\bgetenv\b|\bfrom os import [^\n]*\benviron\b")
#: (file, what the line holds, why it may read the environment)
EXCEPTIONS = [
    (
        "agents_app/mcp/declarations.py",
        "m.group(1)",
        "``${NAME}`` in an MCP server's env or headers: a secret read from the worker's environment "
        "when it connects, never stored, by design not a setting (docs/tools.md)",
    ),
    ("sessions_app/telemetry/setup.py", "OTEL_", "the OpenTelemetry SDK's own OTEL_* variables, which it reads too"),
    ("sessions_app/telemetry/setup.py", "ENDPOINT_VARS", "OTEL_EXPORTER_OTLP_*ENDPOINT: the SDK's own, as above"),
    ("agents_app/providers/anthropic.py", "ANTHROPIC_", "the anthropic SDK's own ANTHROPIC_* variables"),
    ("agents_app/providers/platforms.py", "ANTHROPIC_", "the anthropic SDK's own ANTHROPIC_* variables"),
    ("agents_app/providers/__init__.py", "ANTHROPIC_API_KEY", "the anthropic SDK's key: set, it can be used"),
    (
        "agents_app/providers/__init__.py",
        "_CLIENT_ENVIRON",
        "the ANTHROPIC_* variables a Claude model is built from: a changed one builds it again",
    ),
    (
        "sessions_app/management/commands/june_worker.py",
        'os.environ["Q_CLUSTER_NAME"] =',
        "a write, not a read: django-q2 takes the cluster's name from there",
    ),
    ("june/asgi.py", '"DJANGO_SETTINGS_MODULE"', "a host's asgi.py, in the docstring's example"),
]


def _python_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_JUNE or str(rel) in OWN:
            continue
        found.append(path)
    return found


def test_no_module_reads_the_environment_but_june_settings():
    """A new ``os.environ`` read outside june/settings.py fails here: declare the setting in
    ``june_settings()`` and read ``django.conf.settings`` (or pass the value in)."""
    reads = []
    for path in _python_files():
        rel = str(path.relative_to(ROOT))
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if READ.search(line) and not any(rel == f and held in line for f, held, _ in EXCEPTIONS):
                reads.append(f"{rel}:{n}: {line.strip()}")
    assert reads == [], "\n".join(reads)
    files = {str(p.relative_to(ROOT)) for p in _python_files()}
    assert {f for f, _, _ in EXCEPTIONS} <= files  # no exception outlives its file


def test_every_june_setting_is_documented():
    """Each ``JUNE_*`` name june/settings.py reads or declares is in the README or docs/*.md
    (``JUNE_SCHEDULE_TURN_TIMEOUT`` was in none)."""
    from june.settings import june_settings

    source = (ROOT / "june" / "settings.py").read_text()
    names = set(re.findall(r'"(JUNE_[A-Z0-9_]+)"', source)) | set(june_settings({}))
    docs = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    missing = sorted(n for n in names if not re.search(re.escape(n) + (r"" if n.endswith("_") else r"\b"), docs))
    assert missing == []


HOST_SETTINGS = """
from june_project.settings import *  # noqa: F403

JUNE_MCP_TIMEOUT = 7.5
JUNE_MCP_TOOLS_TTL = 12.0
JUNE_NOTIFY_WEBHOOK_URL = "https://hooks.example/host"
JUNE_MODEL = "demo"
"""
PROBE = """
import json
import django

django.setup()
from django.conf import settings
from agents_app.mcp import parse_servers
from agents_app.providers import provider_name
from agents_app.runtime.agent import Agent
from sessions_app.notify.options import config

[server] = parse_servers("t", [{"name": "a", "command": ["x"]}])
print(json.dumps({"timeout": server.timeout, "ttl": server.tools_ttl, "webhook": config().webhook_url,
                  "model": provider_name(Agent(name="t", model="anthropic")),
                  "unset": settings.JUNE_NOTIFY_TIMEOUT}))
"""


def test_a_host_projects_settings_win_over_the_environment(tmp_path):
    """A host project's ``settings.JUNE_MCP_TIMEOUT`` (and the others) is what June uses, whatever
    the environment says; a setting the host leaves out comes from the environment."""
    (tmp_path / "hostsettings.py").write_text(HOST_SETTINGS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_SETTINGS"))}
    env.update(
        DJANGO_SETTINGS_MODULE="hostsettings",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
        JUNE_VAR_DIR=str(tmp_path / "var"),
        JUNE_MCP_TIMEOUT="99",
        JUNE_MCP_TOOLS_TTL="99",
        JUNE_NOTIFY_WEBHOOK_URL="https://hooks.example/environment",
        JUNE_MODEL="anthropic",
        JUNE_NOTIFY_TIMEOUT="4",
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "timeout": 7.5,
        "ttl": 12.0,
        "webhook": "https://hooks.example/host",
        "model": "demo",
        "unset": 4.0,
    }


def test_per_agent_webhook_variables_become_one_setting_each():
    """``JUNE_WEBHOOK_SECRET_<AGENT>`` / ``JUNE_WEBHOOK_URL_<AGENT>`` (docs/proactive.md) fill the
    dicts the webhook channel reads, keyed by the agent's name as the variable spells it."""
    from june.settings import june_settings

    found = june_settings(
        {
            "JUNE_WEBHOOK_SECRET_OPS": "s3",
            "JUNE_WEBHOOK_URL_OPS": "https://x.example/r",
            "JUNE_WEBHOOK_SECRET_EMPTY": "",
        }
    )
    assert found["JUNE_WEBHOOK_SECRETS"] == {"OPS": "s3"}
    assert found["JUNE_WEBHOOK_URLS"] == {"OPS": "https://x.example/r"}
