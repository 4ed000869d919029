from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("whatif", "0005_more_advice_rules"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="search",
            field=models.BooleanField(default=False, help_text="A search for the cheapest configurations meeting "
                                                               "the SLO (apps.whatif.search) instead of alternatives."),
        ),
    ]
