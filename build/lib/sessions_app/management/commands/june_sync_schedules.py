"""``python manage.py june_sync_schedules``: make django-q2's schedules match the agents'
declarations (run on deploy; ``migrate`` runs it too)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from sessions_app.proactive.schedules import schedules_sync


class Command(BaseCommand):
    help = "Create, update and remove the django-q2 schedules declared by agents (agent.py `schedules`)."

    def handle(self, *args, **options):
        report = schedules_sync()
        for change, names in report.items():
            for name in names:
                self.stdout.write(f"{change}: {name}")
        if not any(report.values()):
            self.stdout.write("schedules are up to date")
