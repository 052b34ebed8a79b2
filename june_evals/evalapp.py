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
        # an eval's versions of agents (a git revision's folder, a cassette or a script for a
        # model) resolve by name in every process, the workers' included
        from june_evals import agent_versions

        agent_versions.install()
        # a case's attached file goes with its row
        from django.db.models.signals import post_delete

        from june_evals.datasets import on_example_file_deleted
        from june_evals.models import ExampleFile

        post_delete.connect(on_example_file_deleted, sender=ExampleFile, dispatch_uid="june_evals_example_file")
        # a user's erasure reaches the cases made from their sessions (imported once apps load)
        from june_evals.datasets import user_cases_erase
        from sessions_app import privacy

        if user_cases_erase not in privacy.ERASERS:
            privacy.ERASERS.append(user_cases_erase)
