# The retry budget is JUNE_MAX_ATTEMPTS (settings), counted by Turn.attempts; the per-turn
# column was always 0 and read by nobody.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0004_lease_lost")]

    operations = [migrations.RemoveField(model_name="turn", name="retry_budget")]
