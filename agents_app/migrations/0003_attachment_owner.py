"""``Attachment.owner_id`` was a bigint holding the uploader's key: a user model keyed by a UUID or
a string could not store it. It becomes a foreign key to the user model (its column takes that
model's key type). A bigint column cannot be cast to a UUID, so the old column is renamed aside,
the new one added and the values copied over for the uploaders that still exist (a user model
with integer keys is the only one that could have stored any); 0004 drops the old column (in a
transaction of its own: PostgreSQL alters no table with the copy's deferred key checks pending)."""

from django.conf import settings
from django.db import migrations, models


def copy_owners(apps, schema_editor):
    Attachment = apps.get_model("agents_app", "Attachment")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    if not isinstance(User._meta.pk, models.IntegerField):  # AutoField and BigAutoField are ones
        return  # no upload could have stored such a key in the bigint column
    legacy = Attachment.objects.exclude(legacy_owner=None).values_list("legacy_owner", flat=True).distinct()
    for pk in User.objects.filter(pk__in=list(legacy)).values_list("pk", flat=True):
        Attachment.objects.filter(legacy_owner=pk).update(owner_id=pk)


class Migration(migrations.Migration):
    dependencies = [
        ("agents_app", "0002_unsent_index"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameField(model_name="attachment", old_name="owner_id", new_name="legacy_owner"),
        migrations.AddField(
            model_name="attachment",
            name="owner",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(copy_owners, migrations.RunPython.noop, elidable=True),
    ]
