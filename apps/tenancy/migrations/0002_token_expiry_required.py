"""API tokens: `issued_at` (when the current secret was issued) and a required expiry, capped by
TOKEN_MAX_DAYS."""

from datetime import timedelta

import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def give_every_token_an_expiry(apps, schema_editor):
    # Existing secrets start their capped period now (AddField gave them issued_at = now): none stops
    # working at once, none lives past now + TOKEN_MAX_DAYS.
    ApiToken = apps.get_model("tenancy", "ApiToken")
    latest = django.utils.timezone.now() + timedelta(days=settings.TOKEN_MAX_DAYS)
    ApiToken.objects.filter(models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=latest)).update(
        expires_at=latest
    )


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="issued_at",
            field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
        ),
        migrations.RunPython(give_every_token_an_expiry, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(help_text="Required; at most TOKEN_MAX_DAYS after the secret was issued."),
        ),
    ]
