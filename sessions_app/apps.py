from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    label = "sessions_app"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate
        from django_q.signals import post_spawn

        # `manage.py migrate` creates the sweeper's django-q2 schedule (docs/workers.md)
        post_migrate.connect(_ensure_schedule, sender=self, dispatch_uid="june.sweeper_schedule")
        # every qcluster worker process runs the lease watchdog (a fast sweeper thread)
        post_spawn.connect(_start_watchdog, dispatch_uid="june.watchdog")
        post_spawn.connect(_freeze_heap, dispatch_uid="june.freeze_heap")


def _ensure_schedule(using: str = "default", **kwargs: object) -> None:
    from django.db import connections

    if "django_q_schedule" not in connections[using].introspection.table_names():
        return  # django_q is not migrated yet (a partial migrate): the next migrate creates it
    from .tasks import ensure_sweeper_schedule

    ensure_sweeper_schedule()


def _start_watchdog(**kwargs: object) -> None:
    from django_q.conf import Conf

    if Conf.SYNC:  # tasks run inline in the caller (tests): no worker process to watch from
        return
    from .worker import start_watchdog

    start_watchdog()


def _freeze_heap(**kwargs: object) -> None:
    """A worker has started up: move what start-up allocated (Django, the apps, the modules) out
    of the garbage collector's view, so gen-2 collections stay short while turns run."""
    import gc

    gc.collect()
    gc.freeze()
