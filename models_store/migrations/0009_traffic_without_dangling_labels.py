"""Issue 22 (F13): a traffic split never names a version label that does not
exist. Before, deleting a version dropped its labels and left them in the
split, and a label created later under the same name took their share. This
drops such entries from every split (audited as ``traffic.set`` by the
system), with the remaining weights scaled back to 100 as the router already
did (a dangling entry's share went to the others); a split with no weight
left is cleared."""

from django.db import migrations
from django.db.models import F


def scaled(weights: dict[str, int]) -> dict[str, int]:
    """Whole percentages proportional to ``weights``, adding up to 100
    (largest remainders); {} when they add up to 0."""
    total = sum(weights.values())
    if total == 0:
        return {}
    exact = {label: weight * 100 / total for label, weight in weights.items()}
    out = {label: int(share) for label, share in exact.items()}
    for label in sorted(exact, key=lambda k: (out[k] - exact[k], k))[: 100 - sum(out.values())]:
        out[label] += 1
    return dict(sorted(out.items()))


def drop_dangling_labels(apps, schema_editor):
    RegisteredModel = apps.get_model("models_store", "RegisteredModel")
    VersionLabel = apps.get_model("models_store", "VersionLabel")
    AuditEvent = apps.get_model("models_store", "AuditEvent")
    RegistryStamp = apps.get_model("models_store", "RegistryStamp")
    changed = False
    for model in RegisteredModel.objects.exclude(traffic={}):
        before = model.traffic or {}
        labels = set(VersionLabel.objects.filter(model=model).values_list("name", flat=True))
        dropped = sorted(set(before) - labels)
        if not dropped:
            continue
        model.traffic = scaled({label: weight for label, weight in before.items() if label in labels})
        model.save(update_fields=["traffic"])
        detail = {"traffic": model.traffic, "before": before, "dropped": dropped, "reason": "labels that do not exist"}
        AuditEvent.objects.create(
            actor_name="system", action="traffic.set", model=model, model_name=model.name, detail=detail
        )
        changed = True
    if changed:
        RegistryStamp.objects.filter(pk=1).update(counter=F("counter") + 1)


class Migration(migrations.Migration):
    dependencies = [("models_store", "0008_model_payload_logging")]

    operations = [migrations.RunPython(drop_dangling_labels, migrations.RunPython.noop)]
