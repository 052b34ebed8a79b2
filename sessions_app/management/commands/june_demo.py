"""Create the embedded default's demo logins and data (``python3 dev.py run`` calls it).

Refuses to run unless ``JUNE_EMBEDDED`` is on: production settings never get a demo login.
Each run sets fresh random passwords and prints them (``JUNE_DEMO_PASSWORD`` fixes both, for
scripts); it is idempotent otherwise.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agents_app.models import Order

OPERATORS_GROUP = "operators"
#: what the demo operator may do in the admin besides the inbox (docs/proactive.md from the
#: embedded default): see and run schedules, see their runs, webhook deliveries and q2's tasks
OPERATOR_PERMISSIONS = {
    "agents_app": [
        "view_agentschedule",
        "change_agentschedule",
        "view_schedulerun",
        "view_webhookdelivery",
        "view_order",
        "view_refund",
    ],
    "django_q": ["view_schedule", "view_success", "view_failure", "view_ormq"],
}


class Command(BaseCommand):
    help = "Create the demo user, the operators group with a demo operator, and demo data (embedded default only)."

    def handle(self, *args, **options):
        if not getattr(settings, "JUNE_EMBEDDED", False):
            raise CommandError(
                "june_demo runs only under the embedded default (JUNE_EMBEDDED=1); "
                "it creates logins with printed passwords and must never run in production"
            )
        fixed = settings.JUNE_DEMO_PASSWORD
        with transaction.atomic():
            demo, demo_pw = _user("demo", fixed or secrets.token_urlsafe(9), staff=False)
            operator, operator_pw = _user("operator", fixed or secrets.token_urlsafe(9), staff=True)
            group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
            operator.groups.add(group)
            for app_label, codenames in OPERATOR_PERMISSIONS.items():
                group.permissions.add(
                    *Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
                )
            _demo_orders()
        self.stdout.write(self.style.SUCCESS("Demo logins (new passwords on every start):"))
        self.stdout.write(f"  chat user   username: {demo.username}      password: {demo_pw}")
        self.stdout.write(
            f"  operator    username: {operator.username}  password: {operator_pw}"
            "   (staff, in the 'operators' group: answers refunds in the admin inbox,"
            " sees the dashboard, runs schedules)"
        )
        self.stdout.write("  operator console: /admin/june/dashboard/   API docs: /api/docs/")


def _user(username: str, password: str, *, staff: bool):
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.is_staff = staff
    user.is_active = True
    user.set_password(password)
    user.save()
    return user, password


def _demo_orders() -> None:
    if not Order.objects.exists():
        Order.objects.create(item="blue mugs", quantity=12)
        Order.objects.create(item="green tea", quantity=3)
