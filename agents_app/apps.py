from django.apps import AppConfig
from django.conf import settings

from june.settings import install_defaults

# every JUNE_* setting the project does not define gets June's default (or its JUNE_* environment
# variable) now, before any of the app's modules reads one: a host project sets none of them
install_defaults(settings)


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    label = "agents_app"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # imported here: the module uses models, which cannot load before the app registry
        from agents_app.forget import forget_demo_rows, turns_forgotten

        # a deleted session's turns take the demo agent's orders and refunds with them
        turns_forgotten.connect(forget_demo_rows, dispatch_uid="june.forget_demo_rows")
