"""Scripts stored before tokens were redacted at submission held the raw token."""

from django.db import migrations


def redact(apps, schema_editor):
    from jobs.access import redact_token

    Job = apps.get_model("jobs", "Job")
    for job in Job.objects.filter(script__contains="MEDBAY_JOB_TOKEN=mbj_").only("script"):
        Job.objects.filter(pk=job.pk).update(script=redact_token(job.script))


class Migration(migrations.Migration):
    dependencies = [("jobs", "0004_jobstatechange_node_names")]

    operations = [migrations.RunPython(redact, migrations.RunPython.noop)]
