"""Imported versions recorded the server's path of their directory as their
source (``/srv/models/iris/1``), shown on the version page, in the API and in
the audit log. Rewrite those to the directory relative to the repository
(``import: iris/1``), as imports now write them
(models_store.intake.repository.import_source)."""

from __future__ import annotations

from pathlib import PurePath

from django.db import migrations


def _relative(source):
    if not isinstance(source, str) or not source.startswith("/"):
        return None
    path = PurePath(source)
    return f"import: {path.parent.name}/{path.name}"


def forwards(apps, schema_editor):
    ModelVersion = apps.get_model("models_store", "ModelVersion")
    AuditEvent = apps.get_model("models_store", "AuditEvent")
    for version in ModelVersion.objects.filter(source__startswith="/").only("pk", "source"):
        ModelVersion.objects.filter(pk=version.pk).update(source=_relative(version.source))
    for event in AuditEvent.objects.filter(detail__has_key="source").only("pk", "detail"):
        relative = _relative(event.detail.get("source"))
        if relative is not None:
            AuditEvent.objects.filter(pk=event.pk).update(detail={**event.detail, "source": relative})


class Migration(migrations.Migration):
    dependencies = [("models_store", "0015_shadow")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
