"""Traffic split, payload logging and team limits services: checks,
audit, the change stamp (runs on SQLite and on PostgreSQL)."""

from __future__ import annotations

import pytest

from models_store import selectors, services
from models_store.models import AuditEvent, RegistryStamp
from tests.support import onnx_models as m
from tests.support.store import person, stage

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def model():
    """Model "m" of team ml: versions 1, 2 READY (stable -> 1, canary -> 2) and 3 FAILED."""
    alice = person("alice", "ml")
    team = alice.teams.get()
    for scale in (1.0, 2.0):
        services.version_upload("m", stage(m.affine(scale, 0.0)), alice, team=team)
    services.version_upload("m", stage(m.failing_model()), alice)
    found = selectors.model_get("m")
    services.label_set(found, "stable", 1, alice)
    services.label_set(found, "canary", 2, alice)
    return selectors.model_get("m"), alice


def _stamp() -> int:
    return RegistryStamp.objects.get(pk=1).counter


def test_a_split_is_set_audited_and_serves_both(model):
    found, alice = model
    assert selectors.served_numbers(found) == [2]
    before = _stamp()
    services.traffic_set(found, {"stable": 90, "canary": 10}, alice)
    found = selectors.model_detail("m")
    assert found.traffic == {"canary": 10, "stable": 90} and _stamp() > before
    assert selectors.served_numbers(found) == [2, 1]
    event = AuditEvent.objects.filter(action="traffic.set").latest("id")
    assert event.actor_name == "alice" and event.detail["versions"] == {"canary": 2, "stable": 1}


@pytest.mark.parametrize(
    "weights, error, words",
    [
        ({"stable": 50}, services.Conflict, "add up to 100, not 50"),
        ({"stable": 50, "nope": 50}, services.Conflict, "no version label 'nope'"),
        ({"stable": 101, "canary": -1}, services.RegistryError, "from 0 to 100"),
        ({"stable": 100.0}, services.RegistryError, "integer"),
    ],
)
def test_bad_splits_change_nothing(model, weights, error, words):
    found, alice = model
    with pytest.raises(error, match=words):
        services.traffic_set(found, weights, alice)
    assert selectors.model_get("m").traffic == {}


def test_all_zero_weights_are_refused(model):
    found, alice = model
    with pytest.raises(services.Conflict, match="add up to 100, not 0"):
        services.traffic_set(found, {"stable": 0}, alice)


def test_promote_and_rollback(model):
    found, alice = model
    services.traffic_set(found, {"stable": 80, "canary": 20}, alice)
    with pytest.raises(services.Conflict, match="change the split first"):
        services.label_delete(found, "canary", alice)
    services.traffic_rollback(found, alice)
    found = selectors.model_detail("m")
    assert found.traffic == {"canary": 0, "stable": 100} and selectors.label_numbers(found) == {
        "canary": 2,
        "stable": 1,
    }
    services.traffic_promote(found, alice)
    found = selectors.model_detail("m")
    assert found.traffic == {"canary": 0, "stable": 100} and selectors.label_numbers(found) == {
        "canary": 2,
        "stable": 2,
    }
    actions = list(
        AuditEvent.objects.filter(action__startswith="traffic.").order_by("id").values_list("action", "version_number")
    )
    assert actions == [("traffic.set", None), ("traffic.rollback", 1), ("traffic.promote", 2)]
    assert services.label_delete(found, "canary", alice)  # weight 0: it may go now
    with pytest.raises(services.Conflict, match="no version label 'canary' to promote"):
        services.traffic_promote(found, alice)


def test_payload_logging_and_team_limits_are_audited(model):
    found, alice = model
    services.model_set_payload_logging(found, 0.25, 1024, alice)
    found = selectors.model_get("m")
    assert (found.payload_log_rate, found.payload_log_max_bytes) == (0.25, 1024)
    with pytest.raises(services.RegistryError):
        services.model_set_payload_logging(found, 1.5, 1024, alice)
    team = alice.teams.get()
    before = _stamp()
    services.team_set_limits(team, rate=10.0, burst=None, in_flight=2, actor=None)
    team.refresh_from_db()
    assert (team.rate_limit_rps, team.rate_limit_burst, team.max_in_flight) == (10.0, None, 2) and _stamp() > before
    event = AuditEvent.objects.filter(action="team.limits").latest("id")
    assert event.detail == {"team": "ml", "rate": 10.0, "burst": None, "in_flight": 2}
    assert selectors.inference_access().team_limits == {team.pk: (10.0, None, 2)}
