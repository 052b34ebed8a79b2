"""``python manage.py june_worker``: django-q2's ``qcluster`` that stops within seconds on
SIGTERM or SIGINT, sent to its main process or to its whole process group (see
``sessions_app.workers.shutdown`` and docs/workers.md "Stopping")."""

from __future__ import annotations

import gc
import importlib
import logging
import os
import sys

from django.conf import settings
from django_q.management.commands.qcluster import Command as QclusterCommand

from sessions_app.workers.shutdown import PromptCluster

log = logging.getLogger(__name__)


def _warm_providers() -> None:
    """The model SDKs, and the MCP SDK if an agent has an MCP server, imported once, here,
    before the cluster forks its workers: each worker inherits them instead of importing on its
    first turn with its loop held (providers.warm, mcp.warm)."""
    from agents_app import mcp
    from agents_app.providers import warm
    from sessions_app import wiring

    try:
        agents = list(wiring.agents().values())
        warm(agents)
        mcp.warm(agents)
    except Exception:  # an agent that does not load is reported by its turns, as before
        log.warning("could not warm the model providers", exc_info=True)


def _preload_worker_modules() -> None:
    """What every worker imports as it starts — its runner, taker and watchdog, the event loop, the
    channel layer's client (with redis, msgpack, cryptography, OpenTelemetry's API) — and at its
    first turns (the notifications' passes, the model SDK's HTTP transport, Claude's fallback
    list), imported once here, before the cluster forks its workers: its pages are then shared by
    the workers instead of copied into each (docs/workers.md "Memory")."""
    from django.utils.module_loading import import_string

    try:
        import encodings.idna  # noqa: F401 (a host name's encoding, at the first connection)

        import sessions_app.notify.failures  # noqa: F401
        import sessions_app.notify.outbox  # noqa: F401
        import sessions_app.notify.sender  # noqa: F401
        import sessions_app.notify.text  # noqa: F401
        import sessions_app.workers.tasks  # noqa: F401
        import sessions_app.workers.watchdog  # noqa: F401

        # what a loaded SDK imports at its first call: only where the SDK is (``_warm_providers``)
        for module, loaded in (("httpcore2", "httpx2"), ("agents_app.providers.fallback", "anthropic")):
            if loaded in sys.modules:
                importlib.import_module(module)

        backend = getattr(settings, "CHANNEL_LAYERS", {}).get("default", {}).get("BACKEND")
        if backend:
            import_string(backend)
        if getattr(settings, "JUNE_EVENT_LOOP", "uvloop") != "asyncio":
            import uvloop  # noqa: F401
    except Exception:  # an import a worker would fail on too: it reports it there, as before
        log.warning("could not preload the workers' modules", exc_info=True)


class Command(QclusterCommand):
    help = "Start a django-q2 cluster that stops promptly on SIGTERM/SIGINT (its turns resume elsewhere)"

    def handle(self, *args, **options):
        settings.SECRET_KEY  # noqa: B018 (q2 signs tasks with it: fail before starting)
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        _warm_providers()
        _preload_worker_modules()
        # everything start-up allocated, out of the collector's reach before the cluster forks:
        # a child's first collection would otherwise write to every object's header, copying the
        # pages it shares with this process into its own (docs/workers.md "Memory")
        gc.collect()
        gc.freeze()
        cluster = PromptCluster()
        if options.get("run_once"):
            cluster.start()
            cluster.stop_signal = 0  # stop right after the start
        status = cluster.run()
        # the cluster is down and its leases released: skip the interpreter's teardown (a second
        # or more of module finalization on a busy machine) — nothing is left to clean up
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
