"""``python manage.py june chat <agent> <session> "<text>" [--json]`` runs one turn in this
process and prints its events as they happen; ``june token <username>`` prints an API token;
``june erase-user <username> [--cancel] [--json]`` deletes one user's data and ``june retention
[--dry-run]`` runs one pass of the privacy sweep, printing what went (docs/privacy.md);
``june health [--json] [--min-workers N] [--mcp]`` prints ``/readyz``'s checks and the workers'
heartbeats (and, with ``--mcp``, whether each agent's MCP servers answer and their entries name
tools they offer), and exits 1 when the site is not ready, 2 when fewer than N workers are
alive, 3 when an MCP server's tools are not offered (docs/operations.md "Health"). Installed
apps add subcommands (``EXTENSIONS``: the evals' ``june eval``, docs/evals.md) without this
module knowing them."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents_app import mcp
from agents_app.runtime import JuneError, LocalDispatcher, TurnInput
from agents_app.runtime.events import TERMINAL_TYPES, TurnEvent
from sessions_app import health, privacy, retention, services, wiring
from sessions_app.models import ApiToken
from sessions_app.site_errors import UserBusy


class Extension(Protocol):
    """A subcommand an installed app adds (registered from its AppConfig.ready)."""

    help: str

    def add_arguments(self, parser: Any) -> None:
        """Declare the subcommand's arguments on its own parser."""

    def handle(self, command: BaseCommand, opts: dict[str, Any]) -> None:
        """Run it; raise CommandError (or SystemExit with a code) to fail."""


#: subcommand name -> what an installed app registered for it
EXTENSIONS: dict[str, Extension] = {}


#: ``june retention`` when no agent has a retention time (nothing but the audit log's ages out)
RETENTION_OFF = (
    "retention is off for every agent: neither JUNE_RETENTION nor an agent's `retention` sets a "
    "time, so no session, generation or upload expires (docs/privacy.md)"
)


class Command(BaseCommand):
    help = (
        "June: chat with an agent from the terminal, print an API token, erase a user's data, run the "
        "privacy sweep, check the site's health (and what installed apps add: run an eval)"
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        chat = sub.add_parser("chat", help="run one turn and print its events")
        chat.add_argument("agent")
        chat.add_argument("session")
        chat.add_argument("text")
        chat.add_argument("--json", action="store_true", help="one JSON object per event per line")
        chat.add_argument("--replace", action="store_true", help="cancel unfinished turns of the session first")
        token = sub.add_parser("token", help="create an API token for a user and print it")
        token.add_argument("username")
        token.add_argument("--name", default="cli")
        erase = sub.add_parser("erase-user", help="delete one user's data everywhere June keeps it (docs/privacy.md)")
        erase.add_argument("username")
        erase.add_argument(
            "--cancel", action="store_true", help="cancel the user's unfinished turns first (else refuse while any)"
        )
        erase.add_argument("--wait", type=float, default=30.0, help="seconds to wait for cancelled turns to stop")
        erase.add_argument("--json", action="store_true", help="print the report as one JSON object")
        keep = sub.add_parser("retention", help="one pass of the privacy sweep (retention, the audit log's own)")
        keep.add_argument("--dry-run", action="store_true", help="delete nothing: print what would go")
        check = sub.add_parser("health", help="print the readiness checks and the workers; exit 1 if not ready")
        check.add_argument("--json", action="store_true", help="one JSON object: the checks and the workers")
        check.add_argument(
            "--min-workers",
            type=int,
            default=0,
            help="exit 2 when fewer worker processes than this are alive (default 0)",
        )
        check.add_argument(
            "--mcp", action="store_true", help="connect to every agent's MCP servers; exit 3 if one is not ok"
        )
        for name, extension in sorted(EXTENSIONS.items()):
            extension.add_arguments(sub.add_parser(name, help=extension.help))

    def handle(self, *args, **opts):
        if opts["action"] in EXTENSIONS:
            return EXTENSIONS[opts["action"]].handle(self, opts)
        if opts["action"] == "token":
            return self.token(opts["username"], opts["name"])
        if opts["action"] == "retention":
            report = retention.retention_sweep(dry_run=opts["dry_run"])
            self.stdout.write(json.dumps(report))
            if not retention.policies():  # (the agents with a retention time)
                self.stderr.write(RETENTION_OFF)  # beside the JSON: why it reads "agents": {}
            return None
        if opts["action"] == "erase-user":
            return self.erase_user(opts)
        if opts["action"] == "health":
            return self.health(as_json=opts["json"], min_workers=opts["min_workers"], check_mcp=opts["mcp"])
        return self.chat(opts)

    def health(self, *, as_json: bool, min_workers: int, check_mcp: bool = False) -> None:
        report = async_to_sync(health.readiness)()
        servers = async_to_sync(mcp.status)(wiring.agents()) if check_mcp else {}
        try:
            workers = health.worker_rows()
        except Exception:  # the database is down: the checks say so
            workers = []
        alive = sum(1 for w in workers if not w["stale"])
        if as_json:
            self.stdout.write(
                json.dumps(
                    {
                        **report,
                        "worker_rows": [
                            {
                                "id": w["id"],
                                "age": round(w["age"], 1),
                                "running": w["running"],
                                "slots": w["slots"],
                                "stale": w["stale"],
                            }
                            for w in workers
                        ],
                        **({"mcp": servers} if check_mcp else {}),
                    }
                )
            )
        else:
            self.stdout.write(f"ready: {'yes' if report['status'] == health.OK else 'NO'}")
            for name, state in report["checks"].items():
                self.stdout.write(f"  {name:<14} {state}")
            gone = len(workers) - alive
            self.stdout.write(f"workers: {alive} alive" + (f", {gone} gone" if gone else ""))
            for w in workers:
                self.stdout.write(
                    f"  {w['id']:<40} seen {w['age']:.1f} s ago  {w['running']}/{w['slots']} turns"
                    + (f"  GONE (no heartbeat for {health.BEATS_MISSED} beats)" if w["stale"] else "")
                )
            if check_mcp:
                self.stdout.write(f"mcp servers: {len(servers)}")
                for key, state in servers.items():
                    self.stdout.write(f"  {key:<30} {state}")
        if report["status"] != health.OK:
            sys.exit(1)
        if alive < min_workers:
            self.stderr.write(f"{alive} workers alive, fewer than {min_workers}")
            sys.exit(2)
        if any(state != "ok" for state in servers.values()):
            sys.exit(3)

    def erase_user(self, opts) -> None:
        user = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: opts["username"]}).first()
        if user is None:
            raise CommandError(f"no user named {opts['username']!r}")
        try:
            report = privacy.user_erase(user=user, cancel=opts["cancel"], wait_seconds=opts["wait"])
        except UserBusy as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            self.stdout.write(json.dumps({"user_id": str(user.pk), "deleted": report}))
            return
        self.stdout.write(f"erased the data of {user.get_username()} (id {user.pk}):")
        for kind, n in report.items():
            self.stdout.write(f"  {kind:<20} {n}")
        if not report:
            self.stdout.write("  nothing was kept")

    def token(self, username: str, name: str) -> None:
        user = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: username}).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        _, raw = ApiToken.issue(user, name=name)
        self.stdout.write(raw)

    def chat(self, opts) -> None:
        if len(opts["text"]) > 32_000:
            raise CommandError("text is longer than 32,000 characters")
        try:
            wiring.agent(opts["agent"])
            services.validate_session_key(opts["session"])  # as the URLs and the API: else no page opens it
        except JuneError as exc:
            raise CommandError(str(exc)) from None
        as_json = opts["json"]
        out = self.stdout

        def show(event: TurnEvent) -> None:
            if as_json:
                out.write(json.dumps(event.to_json()))
                return
            t = event.type
            data = event.to_json()
            if t == "message.delta":
                out.write(data["text"], ending="")
                out.flush()
            elif t == "message.completed":
                out.write("")
            elif t == "action.requested":
                out.write(f"→ {data['call']['name']}({json.dumps(data['call']['input'])})")
            elif t == "action.completed":
                out.write(
                    f"← {data['name']}: " + (f"error: {data['error']}" if data["error"] else json.dumps(data["result"]))
                )
            elif t == "input.requested":
                out.write(f"? waiting for input: {data['request'].get('prompt')}")
            elif t in TERMINAL_TYPES:
                detail = data.get("error") or data.get("reason") or ""
                out.write(f"[{t}] {detail}".rstrip())

        async def run() -> str:
            rt = wiring.runtime(dispatcher=LocalDispatcher())
            session = rt.session(opts["agent"], opts["session"])
            session.observe(show)
            turn_id = await session.start(TurnInput(text=opts["text"], source="cli"), replace=opts["replace"])
            result = await session.result(turn_id)
            await rt.dispatcher.idle()
            return str(result.status)

        try:
            status = asyncio.run(run())
        except JuneError as exc:
            raise CommandError(str(exc)) from None
        if status == "failed":
            sys.exit(1)
