import gc

from django.apps import AppConfig
from django.conf import settings

from june.settings import install_defaults, tune_sqlite

# every JUNE_* setting the project does not define gets June's default (or its JUNE_* environment
# variable) now, before any of the app's modules reads one: a host project sets none of them
install_defaults(settings)
# and its SQLite databases June's options (june.settings.SQLITE_OPTIONS), before any connection
if settings.JUNE_SQLITE_OPTIONS:
    tune_sqlite(settings.DATABASES)


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    label = "sessions_app"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # imported here: these modules use models, which cannot load before the app registry
        from django.contrib.auth import get_user_model
        from django.contrib.auth.signals import user_logged_out
        from django.core import checks
        from django.db.models.signals import post_delete, post_migrate, post_save
        from django_q.signals import post_spawn

        from agents_app.models import Attachment
        from june.checks import unknown_june_settings
        from sessions_app.attachment_services import on_attachment_deleted, on_session_deleted
        from sessions_app.models import Session
        from sessions_app.web.socketauth import on_logged_out, on_user_saved

        # a JUNE_* setting June does not read (a misspelt name) is a warning of `manage.py check`
        checks.register(unknown_june_settings)
        # `manage.py migrate` creates the sweeper's django-q2 schedule (docs/workers.md) and the
        # agents' declared schedules (deploys also run ``manage.py june_sync_schedules``)
        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="june.schedules")
        # every qcluster worker process runs the lease watchdog (a fast sweeper thread)
        post_spawn.connect(_start_watchdog, dispatch_uid="june.watchdog")
        post_spawn.connect(_freeze_heap, dispatch_uid="june.freeze_heap")
        post_spawn.connect(_serve_turns_concurrently, dispatch_uid="june.runner")
        # a session deleted (the admin) takes its attachments' rows and files with it
        post_delete.connect(on_session_deleted, sender=Session, dispatch_uid="june.attachments")
        post_delete.connect(on_attachment_deleted, sender=Attachment, dispatch_uid="june.attachment_files")
        # a logout or a deactivation closes the user's chat sockets (each frame checks it too)
        user_logged_out.connect(on_logged_out, dispatch_uid="june.socket_logout")
        post_save.connect(on_user_saved, sender=get_user_model(), dispatch_uid="june.socket_deactivated")


def _ensure_schedules(using: str = "default", **kwargs: object) -> None:
    # imported here: apps.py loads before the models it would pull in
    from django.db import connections

    from sessions_app.proactive.schedules import schedules_sync
    from sessions_app.workers.tasks import ensure_privacy_schedule, ensure_sweeper_schedule

    if "django_q_schedule" not in connections[using].introspection.table_names():
        return  # django_q is not migrated yet (a partial migrate): the next migrate creates it
    ensure_sweeper_schedule()
    ensure_privacy_schedule()
    schedules_sync()


def _start_watchdog(**kwargs: object) -> None:
    # imported here: apps.py loads before the models it would pull in
    from django_q.conf import Conf

    from sessions_app.workers.watchdog import start_watchdog

    if Conf.SYNC:  # tasks run inline in the caller (tests): no worker process to watch from
        return
    start_watchdog()


#: a worker's collection thresholds (``gc.set_threshold``): the young generation is collected
#: every 10,000 net allocations, not Python's 700 (docs/workers.md "Memory")
WORKER_GC_THRESHOLD = (10_000, 10, 10)


def _freeze_heap(**kwargs: object) -> None:
    """A worker has started up: move what start-up allocated (Django, the apps, the modules) out
    of the garbage collector's view, so gen-2 collections stay short while turns run. Its young
    generation is collected less often: a turn's objects are freed by their references when it
    ends (its cycles are few), and a collection every 700 allocations walked the live turns'
    objects again and again to find almost nothing."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLD)


def _serve_turns_concurrently(**kwargs: object) -> None:
    # imported here: apps.py loads before the models it would pull in
    from django_q.conf import Conf

    from sessions_app.workers.tasks import serve_turns_concurrently

    if Conf.SYNC:  # tasks run inline in the caller (tests): each drives its turn to its end
        return
    serve_turns_concurrently()
