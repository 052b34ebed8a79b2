"""The app's configuration (``INSTALLED_APPS``: ``"june_evals.evalapp.EvalsConfig"``)."""

from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "june_evals"
    label = "june_evals"
    verbose_name = "June evals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # ``manage.py june eval``: the june command's subcommand, registered once the apps load
        from june_evals import evalcli

        evalcli.register()
