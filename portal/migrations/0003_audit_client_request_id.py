from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0002_job_metrics_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="client_request_id",
            field=models.CharField(blank=True, max_length=64),
        ),
    ]
