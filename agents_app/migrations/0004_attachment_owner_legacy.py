"""Drop the bigint uploader column 0003 copied into ``Attachment.owner``."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("agents_app", "0003_attachment_owner")]

    operations = [migrations.RemoveField(model_name="attachment", name="legacy_owner")]
