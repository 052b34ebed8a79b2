"""Versions of an agent that no folder of the site is, for an eval's run to name durably: the
agent's folder at a git revision (``--against git:REV``), or the agent with a model of the run's
choosing — a cassette's recordings or a script's replies (``--model cassette:FILE``) — or both.

A version is an ``AgentVersion`` row named ``<agent>@<id>``; its turns' sessions name it, and
any process that runs them (a worker, another machine's) resolves the name from the row:
``sessions_app.wiring`` asks ``resolve`` for a name with an ``@`` that no folder has. Everything
a worker needs is in the row — the folder's files (a tar archive, unpacked once per machine under
``JUNE_VAR_DIR/eval-agents``), the cassette's recordings, the script's replies — so nothing is
read again from the repository or the files the run was started with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.db import connections

from agents_app.loader import BUILTIN_DIR, load_agent
from agents_app.providers import model_for as provider_model_for
from agents_app.providers import register
from agents_app.runtime import Agent, ScriptedModel, reply
from agents_app.runtime.seams import Model
from june_evals.models import AgentVersion
from sessions_app import wiring
from sessions_app.site_errors import BadRequest

#: the provider an ``AgentVersion`` with a model of its own names (pinned: ``JUNE_MODEL`` does
#: not replace an eval's explicit choice)
PROVIDER = "june-eval"
#: what a version's files and model may weigh (an agent folder is prompts and a few modules)
MAX_FILES = 5_000_000
MAX_MODEL = 20_000_000
GIT_SECONDS = 30
#: ``package.module:function``
FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")

#: name -> (the version's Agent, the Agent it is a version of, its model), once per process
_loaded: dict[str, tuple[Agent, Agent, dict[str, Any]]] = {}
_lock = threading.Lock()


# -- making one (the command line, the admin) ------------------------------------------------------


def folder_of(agent: str) -> Path:
    """The site's folder of ``agent`` (``JUNE_AGENT_DIRS``, the apps' ``agents/``, the demo's)."""
    roots = [*wiring.agent_dirs(), *([BUILTIN_DIR] if settings.JUNE_DEMO_AGENTS else [])]
    for root in roots:
        folder = Path(root) / agent
        if (folder / "agent.py").exists() or (folder / "instructions.md").exists():
            return folder.resolve()
    raise BadRequest(f"agent {agent!r} has no folder of its own to take at a revision")


def _git(cwd: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, timeout=GIT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadRequest(f"git {args[0]} failed: {exc}") from None
    if done.returncode:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise BadRequest(f"git {args[0]}: {detail[-1] if detail else 'failed'}")
    return done.stdout


def folder_at(agent: str, rev: str) -> tuple[str, str, bytes]:
    """``(commit, folder's path in its repository, the folder at that commit as a tar)``."""
    if not rev or rev.startswith("-"):
        raise BadRequest(f"{rev!r} is not a git revision")
    folder = folder_of(agent)
    try:
        top = Path(_git(folder, "rev-parse", "--show-toplevel").decode().strip()).resolve()
    except BadRequest as exc:
        raise BadRequest(f"{agent}'s folder {folder} is in no git repository ({exc})") from None
    path = folder.relative_to(top).as_posix()
    try:
        sha = _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
    except BadRequest:  # --quiet: git says nothing of a revision it does not have
        raise BadRequest(f"no git revision {rev!r} in {top} (the repository of {agent}'s folder)") from None
    if not _git(top, "ls-tree", "--name-only", sha, "--", path).strip():
        raise BadRequest(f"the agent folder {path} is not in revision {rev} ({sha[:12]})")
    files = _git(top, "archive", "--format=tar", sha, "--", path)
    if len(files) > MAX_FILES:
        raise BadRequest(f"the agent folder {path} at {rev} weighs more than {MAX_FILES} bytes")
    return sha, path, files


def model_spec(spec: str, *, web: bool = False) -> dict[str, Any]:
    """``cassette:FILE`` (a june.testing cassette, replayed), ``script:FILE`` (a JSON list of
    replies, one per model step: a string, or ``{"text", "tool_calls": [{"name", "input"}]}``)
    or ``script:package.module:function`` (a function from the request to a reply). ``web``:
    asked from the admin — a ``.json`` file of the project's (``BASE_DIR``) or ``JUNE_VAR_DIR``,
    no function (a page does not import modules by a typed name)."""
    kind, _, where = spec.partition(":")
    if kind not in ("cassette", "script") or not where:
        raise BadRequest(f"a model is cassette:FILE, script:FILE or script:module:function, not {spec!r}")
    path = Path(where)
    if kind == "script" and FUNCTION.fullmatch(where):
        if web:
            raise BadRequest("a script function is named on the command line (manage.py june eval), not here")
        _function(where)  # importable here, or refused now rather than on every worker
        return {"script": where}
    if web:
        roots = [Path(r).resolve() for r in (getattr(settings, "BASE_DIR", None), settings.JUNE_VAR_DIR) if r]
        if path.suffix != ".json" or not any(path.resolve().is_relative_to(r) for r in roots):
            raise BadRequest("the admin reads a .json file of the project's folder or JUNE_VAR_DIR only")
    try:
        if path.stat().st_size > MAX_MODEL:
            raise BadRequest(f"{where} weighs more than {MAX_MODEL} bytes")
        data = json.loads(path.read_text())
    except OSError as exc:
        raise BadRequest(f"cannot read {where}: {exc.strerror}") from None
    except ValueError as exc:
        raise BadRequest(f"{where} is not JSON: {exc}") from None
    if kind == "cassette":
        if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
            raise BadRequest(f"{where} is not a cassette (no interactions)")
        return {"cassette": path.name, "interactions": data["interactions"]}
    if not isinstance(data, list) or not data:
        raise BadRequest(f"{where}: a script is a JSON list of replies")
    [_reply(r) for r in data]  # each checked now
    return {"script": path.name, "replies": data}


def make(agent: str, *, git: str | None = None, model: str | None = None, web: bool = False) -> AgentVersion | None:
    """The version of ``agent`` at ``git`` (a revision) with ``model`` (``model_spec``), made
    once; None when neither is asked (the site's agent as it is)."""
    wiring.agent(agent, versions=False)  # NotFound for a name the site does not have
    if not git and not model:
        return None
    sha, path, files = folder_at(agent, git) if git else ("", "", b"")
    spec = model_spec(model, web=web) if model else {}
    digest = hashlib.sha256()
    for part in (agent.encode(), sha.encode(), path.encode(), files, json.dumps(spec, sort_keys=True).encode()):
        digest.update(hashlib.sha256(part).digest())
    name = f"{agent[:48]}@{digest.hexdigest()[:12]}"
    row, _ = AgentVersion.objects.get_or_create(
        name=name,
        defaults={"agent": agent, "rev": git or "", "sha": sha, "folder": path, "files": files, "model": spec},
    )
    _load(row)  # a bad folder is refused here, not on the workers
    return row


def describe(row: AgentVersion) -> str:
    parts = [f"{row.agent} at {row.rev} ({row.sha[:12]})" if row.sha else row.agent]
    if row.model:
        parts.append(f"model {'cassette' if 'cassette' in row.model else 'script'} {next(iter(row.model.values()))}")
    return ", ".join(parts)


# -- resolving one (any process) ---------------------------------------------------------------------


def resolve(name: str) -> Agent | None:
    """``wiring``'s resolver: the Agent of the version ``name``, or None if there is no such row."""
    found = _loaded.get(name)
    if found is None:
        row = _off_the_loop(lambda: AgentVersion.objects.filter(name=name).first())
        if row is None:
            return None
        found = _load(row)
    return found[0]


def _off_the_loop(fn: Callable[[], Any]) -> Any:
    """``fn`` (an ORM read) from async code too: the engine asks for an agent inside its event
    loop (once per version and process: the answer is kept), where Django forbids queries."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()

    def closing() -> Any:
        try:
            return fn()
        finally:
            connections.close_all()  # this thread's own connection

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(closing).result()


def _load(row: AgentVersion) -> tuple[Agent, Agent, dict[str, Any]]:
    with _lock:
        if row.name in _loaded:
            return _loaded[row.name]
        base = _unpacked(row) if row.sha else wiring.agent(row.agent, versions=False)
        version = dataclasses.replace(base, name=row.name, model=PROVIDER if row.model else base.model)
        _loaded[row.name] = (version, base, dict(row.model))
        return _loaded[row.name]


def _extract(tar: tarfile.TarFile, into: Path) -> None:
    """Extract plain files and folders only, inside ``into``: tarfile's "data" filter where this
    Python has it (3.11.4 and later), the same rules by hand before."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, filter="data")
        return
    root = into.resolve()
    for member in tar.getmembers():
        path = (root / member.name).resolve()
        if not (member.isfile() or member.isdir()) or not path.is_relative_to(root):
            raise ValueError(f"refused archive member {member.name!r}")
    tar.extractall(into)  # noqa: S202 (members checked above)


def _unpacked(row: AgentVersion) -> Agent:
    """The version's folder, unpacked once per machine, loaded as a package of its own (the
    site's agent of the same name keeps its modules)."""
    ident = row.name.rpartition("@")[2]
    target = Path(settings.JUNE_VAR_DIR).resolve() / "eval-agents" / ident
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{ident}-", dir=target.parent))
        with tarfile.open(fileobj=io.BytesIO(bytes(row.files)), mode="r:") as tar:
            _extract(tar, scratch)
        try:
            os.rename(scratch, target)
        except OSError:  # another process unpacked it first: theirs is the same
            if not target.is_dir():
                raise
    return load_agent(target / row.folder, package=f"june_version_{ident}")


# -- its model ---------------------------------------------------------------------------------------


def _function(where: str) -> Callable[..., Any]:
    module, _, attr = where.rpartition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise BadRequest(f"no script function {where} ({exc})") from None
    if not callable(fn):
        raise BadRequest(f"{where} is not a function")
    return fn  # type: ignore[no-any-return]


def _reply(data: Any) -> Any:
    if isinstance(data, str):
        return reply(data)
    if not isinstance(data, dict) or not isinstance(data.get("text", ""), str):
        raise BadRequest(f"a scripted reply is a string or {{'text', 'tool_calls'}}, not {data!r}")
    calls = data.get("tool_calls") or []
    if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        raise BadRequest(f"a scripted reply's tool_calls are [{{'name', 'input'}}], not {calls!r}")
    return reply(data.get("text", ""), *((c["name"], dict(c.get("input") or {})) for c in calls))


def model_of(agent: Agent) -> Model:
    """The registered provider's factory: the version's cassette or script (``make``)."""
    from june.testing.cassettes import Cassette
    from june.testing.tester import by_step

    if agent.name not in _loaded and resolve(agent.name) is None:
        raise BadRequest(f"no eval version {agent.name!r}")
    _, base, spec = _loaded[agent.name]
    if "interactions" in spec:
        cassette = Cassette(f"cassette {spec['cassette']} of {agent.name}")
        cassette.entries = list(spec["interactions"])
        cassette.bind(base, provider_model_for)  # its requests are keyed by the agent's own model
        return cassette
    if "replies" in spec:
        return ScriptedModel(by_step([_reply(r) for r in spec["replies"]]))
    return ScriptedModel(_function(spec["script"]))


def install() -> None:
    """At the app's start: versions' names resolve, and their models are built here."""
    wiring.resolve_versions_with(resolve)
    register(PROVIDER, model_of, pinned=True)
