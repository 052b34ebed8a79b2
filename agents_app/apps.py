from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    label = "agents_app"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .schedules import sync_on_migrate

        # a migrated database gets the agents' declared schedules (deploys also run
        # ``manage.py june_sync_schedules``)
        post_migrate.connect(sync_on_migrate, sender=self, dispatch_uid="june.schedules.sync")
