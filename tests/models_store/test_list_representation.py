"""The management API's model list writes each model as DRF's own
field-by-field representation of ``ModelSerializer`` writes it (served
versions, default version, labels, traffic, instance groups, versions,
times), for models of every kind: with and without a team, held, retired
and failed versions, labels, a traffic split, shadow traffic, an unloaded
model, a version policy, an ensemble."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework import serializers

from inference.ensembles.plan import PLATFORM as ENSEMBLE
from models_store.accounts import services as accounts
from models_store.models import ModelVersion, RegisteredModel, Team, VersionLabel
from models_store.registry import selectors
from models_store.registry.serializers import ModelSerializer
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

STATES = ModelVersion.State


def _version(model, number: int, state=STATES.READY, **fields) -> ModelVersion:
    fields.setdefault("artifact", f"{model.name}/{number}")
    return ModelVersion.objects.create(
        model=model, number=number, sha256=f"{model.pk:032x}{number:032x}", size=1000 * number, state=state, **fields
    )


def _registry() -> None:
    ml = Team.objects.create(name="ml")
    plain = RegisteredModel.objects.create(name="plain", team=ml, description="one version")
    _version(plain, 1)
    mixed = RegisteredModel.objects.create(
        name="mixed", max_batch_size=8, version_policy="all",
        instance_group=[{"name": "g", "kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}],
        payload_log_rate=0.25, payload_log_max_bytes=4096,
    )  # fmt: skip
    _version(mixed, 1, STATES.FAILED, reason="bad file")
    _version(mixed, 2)
    _version(mixed, 3, STATES.UNAVAILABLE, reason="retired")
    _version(mixed, 4, held=True, reason="held: signature changed")
    split = RegisteredModel.objects.create(name="split", team=ml, version_policy="specific", specific_versions=[1])
    one, two = _version(split, 1), _version(split, 2)
    VersionLabel.objects.create(model=split, name="stable", version=one)
    VersionLabel.objects.create(model=split, name="canary", version=two)
    split.traffic = {"stable": 90, "canary": 10}
    split.shadow_version, split.shadow_percent = two, 50.0
    split.save()
    unloaded = RegisteredModel.objects.create(name="unloaded", loaded=False)
    _version(unloaded, 1)
    RegisteredModel.objects.create(name="empty")
    ensemble = RegisteredModel.objects.create(name="pipeline", platform=ENSEMBLE)
    _version(ensemble, 1, platform=ENSEMBLE, artifact="", properties={"ensemble": "not a plan"})


def _drf(model: RegisteredModel) -> dict:
    """DRF's representation of ``model``'s fields, field by field (its own walk, over prefetched objects)."""
    serializer = ModelSerializer(context={})
    return json.loads(json.dumps(serializers.ModelSerializer.to_representation(serializer, model)))


def test_the_list_writes_every_model_as_drf_does():
    _registry()
    user = person("root", superuser=True)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=user, name='script')[1]}")
    listed = api.get("/api/models/?limit=50").json()["results"]
    expected = [_drf(model) for model in selectors.model_listing()]
    assert [m["name"] for m in listed] == ["empty", "mixed", "pipeline", "plain", "split", "unloaded"]
    assert listed == expected
    by_name = {m["name"]: m for m in listed}
    assert by_name["mixed"]["served_versions"] == [2] and by_name["mixed"]["default_version"] == 2  # held: not served
    assert by_name["split"]["served_versions"] == [2, 1] and by_name["split"]["labels"] == {"canary": 2, "stable": 1}
    assert by_name["unloaded"]["served_versions"] == [] and by_name["empty"]["default_version"] is None
    assert by_name["mixed"]["instance_group"] == [{"name": "g", "kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}]
    assert [v["number"] for v in by_name["mixed"]["versions"]] == [4, 3, 2, 1]


def test_a_list_serialized_without_the_api_reads_its_details_once(django_assert_max_num_queries):
    """``ModelSerializer(models, many=True)`` outside the view: the page's details in one batch of queries."""
    _registry()
    models = list(selectors.model_listing(prefetched=False))
    with django_assert_max_num_queries(8):  # versions, labels, pins; the ensemble's own reads
        data = ModelSerializer(models, many=True).data
    assert json.loads(json.dumps(data)) == [_drf(m) for m in selectors.model_listing()]
