"""Traffic split, payload logging and team limits services: checks,
audit, the change stamp (runs on SQLite and on PostgreSQL)."""

from __future__ import annotations

import pytest

from models_store import errors
from models_store.accounts import selectors as account_selectors
from models_store.accounts import services as accounts
from models_store.intake import services as intake
from models_store.models import AuditEvent, RegistryStamp
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import routes, versions
from tests.support import onnx_models as m
from tests.support.store import person, stage

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def model():
    """Model "m" of team ml: versions 1, 2 READY (stable -> 1, canary -> 2) and 3 FAILED."""
    alice = person("alice", "ml")
    team = alice.teams.get()
    for scale in (1.0, 2.0):
        intake.version_upload(model_name="m", staged=stage(m.affine(scale, 0.0)), actor=alice, team=team)
    intake.version_upload(model_name="m", staged=stage(m.failing_model()), actor=alice)
    found = selectors.model_get("m")
    routes.label_set(model=found, name="stable", number=1, actor=alice)
    routes.label_set(model=found, name="canary", number=2, actor=alice)
    return selectors.model_get("m"), alice


def _stamp() -> int:
    return RegistryStamp.objects.get(pk=1).counter


def test_a_split_is_set_audited_and_serves_both(model):
    found, alice = model
    assert list(selectors.serving(found).served) == [2]
    before = _stamp()
    routes.traffic_set(model=found, weights={"stable": 90, "canary": 10}, actor=alice)
    found = selectors.model_detail("m")
    assert found.traffic == {"canary": 10, "stable": 90} and _stamp() > before
    assert list(selectors.serving(found).served) == [2, 1]
    event = AuditEvent.objects.filter(action="traffic.set").latest("id")
    assert event.actor_name == "alice" and event.detail["versions"] == {"canary": 2, "stable": 1}


@pytest.mark.parametrize(
    "weights, error, words",
    [
        ({"stable": 50}, errors.Conflict, "add up to 100, not 50"),
        ({"stable": 50, "nope": 50}, errors.Conflict, "no version label 'nope'"),
        ({"stable": 101, "canary": -1}, errors.RegistryError, "from 0 to 100"),
        ({"stable": 100.0}, errors.RegistryError, "integer"),
    ],
)
def test_bad_splits_change_nothing(model, weights, error, words):
    found, alice = model
    with pytest.raises(error, match=words):
        routes.traffic_set(model=found, weights=weights, actor=alice)
    assert selectors.model_get("m").traffic == {}


def test_all_zero_weights_are_refused(model):
    found, alice = model
    with pytest.raises(errors.Conflict, match="add up to 100, not 0"):
        routes.traffic_set(model=found, weights={"stable": 0}, actor=alice)


def test_promote_and_rollback(model):
    found, alice = model
    routes.traffic_set(model=found, weights={"stable": 80, "canary": 20}, actor=alice)
    with pytest.raises(errors.Conflict, match="change the split first"):
        routes.label_delete(model=found, name="canary", actor=alice)
    routes.traffic_rollback(model=found, actor=alice)
    found = selectors.model_detail("m")
    assert found.traffic == {"canary": 0, "stable": 100} and selectors.label_numbers(found) == {
        "canary": 2,
        "stable": 1,
    }
    routes.traffic_promote(model=found, actor=alice)
    found = selectors.model_detail("m")
    assert found.traffic == {"canary": 0, "stable": 100} and selectors.label_numbers(found) == {
        "canary": 2,
        "stable": 2,
    }
    actions = list(
        AuditEvent.objects.filter(action__startswith="traffic.").order_by("id").values_list("action", "version_number")
    )
    assert actions == [("traffic.set", None), ("traffic.rollback", 1), ("traffic.promote", 2)]
    assert routes.label_delete(model=found, name="canary", actor=alice)  # weight 0: it may go now
    with pytest.raises(errors.Conflict, match="no version label 'canary' to promote"):
        routes.traffic_promote(model=found, actor=alice)


def test_a_version_the_split_sends_requests_to_cannot_be_deleted(model):
    """F13: deleting a version whose label the split uses was accepted and
    left the label in the split, so a label re-created under that name took
    its share silently. Now: Conflict naming the split, nothing changes."""
    found, alice = model
    routes.traffic_set(model=found, weights={"stable": 70, "canary": 30}, actor=alice)
    before = (_stamp(), AuditEvent.objects.count())
    with pytest.raises(errors.Conflict) as info:
        versions.version_delete(version=selectors.version_get(found, 2), actor=alice)
    assert str(info.value) == (
        "the traffic split of 'm' sends 30% of its requests to label 'canary', which points at version 2; "
        "change the split first"
    )
    found = selectors.model_detail("m")
    assert selectors.version_get(found, 2) is not None and selectors.label_numbers(found) == {"canary": 2, "stable": 1}
    assert found.traffic == {"canary": 30, "stable": 70} and (_stamp(), AuditEvent.objects.count()) == before
    with pytest.raises(errors.Conflict, match="sends 70% of its requests to label 'stable'"):
        routes.label_delete(model=found, name="stable", actor=alice)


def test_a_label_the_split_gives_no_weight_leaves_the_split_with_its_version(model):
    """Weight 0 (a rolled-back canary): deleting its version (or the label)
    takes the label out of the split in the same transaction, audited as
    traffic.set; a label re-created under that name gets no request."""
    found, alice = model
    routes.traffic_set(model=found, weights={"stable": 70, "canary": 30}, actor=alice)
    routes.traffic_rollback(model=found, actor=alice)
    versions.version_delete(version=selectors.version_get(found, 2), actor=alice)
    found = selectors.model_detail("m")
    assert found.traffic == {"stable": 100} and selectors.label_numbers(found) == {"stable": 1}
    events = list(AuditEvent.objects.order_by("-id").values_list("action", "actor_name", "detail")[:2])
    assert [e[:2] for e in events] == [("version.delete", "alice"), ("traffic.set", "alice")]
    assert events[1][2] == {
        "traffic": {"stable": 100}, "before": {"canary": 0, "stable": 100}, "versions": {"stable": 1}, "dropped": ["canary"]
    }  # fmt: skip
    intake.version_upload(model_name="m", staged=stage(m.affine(4.0, 0.0)), actor=alice)
    routes.label_set(model=found, name="canary", number=4, actor=alice)
    assert selectors.model_detail("m").traffic == {"stable": 100}  # the new canary is not in the split
    served = list(selectors.serving(selectors.model_detail("m")).served)
    assert served == [4, 1]  # 4 by the latest policy, 1 by the split; the canary label routes nothing


def test_a_model_whose_split_sends_requests_cannot_be_deleted_until_it_is_cleared(model):
    found, alice = model
    routes.traffic_set(model=found, weights={"stable": 70, "canary": 30}, actor=alice)
    with pytest.raises(errors.Conflict, match=r"sends 30% of its requests to label 'canary'.* 70% .* label 'stable'"):
        model_services.model_delete(model=found, actor=alice)
    routes.traffic_set(model=found, weights={"stable": 100, "canary": 0}, actor=alice)
    with pytest.raises(errors.Conflict, match=r"sends 100% of its requests to label 'stable'; change the split first$"):
        model_services.model_delete(model=found, actor=alice)
    routes.traffic_set(model=found, weights={}, actor=alice)
    model_services.model_delete(model=found, actor=alice)  # its labels go along
    assert selectors.model_get("m") is None


def test_the_migration_drops_labels_a_split_names_but_that_do_not_exist(model):
    """Splits left dangling before the fix (0009): the entry goes, the other
    weights are scaled back to 100, audited by the system."""
    from importlib import import_module

    from django.apps import apps

    from models_store.models import RegisteredModel, VersionLabel

    found, _alice = model
    RegisteredModel.objects.filter(pk=found.pk).update(traffic={"canary": 20, "stable": 60, "shadow": 20})
    VersionLabel.objects.filter(model=found, name="shadow").delete()  # never existed: as after a version delete
    stamp = _stamp()
    import_module("models_store.migrations.0009_traffic_without_dangling_labels").drop_dangling_labels(apps, None)
    assert selectors.model_get("m").traffic == {"canary": 25, "stable": 75} and _stamp() == stamp + 1
    event = AuditEvent.objects.latest("id")
    assert (event.action, event.actor_name, event.detail["dropped"]) == ("traffic.set", "system", ["shadow"])


def test_payload_logging_and_team_limits_are_audited(model):
    found, alice = model
    model_services.model_set_payload_logging(model=found, rate=0.25, max_bytes=1024, actor=alice)
    found = selectors.model_get("m")
    assert (found.payload_log_rate, found.payload_log_max_bytes) == (0.25, 1024)
    with pytest.raises(errors.RegistryError):
        model_services.model_set_payload_logging(model=found, rate=1.5, max_bytes=1024, actor=alice)
    team = alice.teams.get()
    before = _stamp()
    accounts.team_set_limits(team=team, rate=10.0, burst=None, in_flight=2, actor=None)
    team.refresh_from_db()
    assert (team.rate_limit_rps, team.rate_limit_burst, team.max_in_flight) == (10.0, None, 2) and _stamp() > before
    event = AuditEvent.objects.filter(action="team.limits").latest("id")
    assert event.detail == {"team": "ml", "rate": 10.0, "burst": None, "in_flight": 2}
    assert account_selectors.inference_access().team_limits == {team.pk: (10.0, None, 2)}
