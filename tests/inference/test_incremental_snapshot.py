"""The serving registry re-reads only the models a write changed
(models_store.stamp.RegistryChange), and what it serves then is what a
whole read would give (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import enum

import numpy as np
import pytest

from inference.serving.registry import ModelRegistry
from inference.serving.snapshot import build_snapshot
from models_store.accounts import services as accounts
from models_store.intake.repository import import_repository
from models_store.models import ModelVersion, RegisteredModel, RegistryChange
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import routes, shadow, states
from models_store.serving import StoreRegistrySource
from models_store.stamp import KEEP_CHANGES, bump_stamp, changed_models, stamp_get
from tests.support import onnx_models as m
from tests.support.repository import _ensemble
from tests.support.store import force_state

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


class _Counting(StoreRegistrySource):
    """The store's source, noting what each read asked for (None: every model)."""

    def __init__(self):
        super().__init__()
        self.reads: list = []

    def models(self, names=None):
        self.reads.append(None if names is None else sorted(names))
        return super().models(names)


@pytest.fixture
def registry(tmp_path):
    root = tmp_path / "repo"
    m.write_model(root, "a", m.affine(1.0, 1.0), version=1)
    m.write_model(root, "a", m.affine(1.0, 2.0), version=2)
    m.write_model(root, "b", m.affine(2.0, 0.0))
    m.write_model(root, "c", m.affine(3.0, 0.0))
    import_repository(root)
    source = _Counting()
    registry = ModelRegistry(source, poll_seconds=0)
    registry.start()
    source.reads.clear()
    yield registry, source
    registry.stop()


def _dump(value):
    """A comparable form of snapshot entries (they compare by identity)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple((f.name, _dump(getattr(value, f.name))) for f in dataclasses.fields(value)))
    if isinstance(value, dict):
        return tuple(sorted((repr(k), _dump(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_dump(v) for v in value)
    if isinstance(value, (frozenset, set)):
        return tuple(sorted(repr(v) for v in value))
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, enum.Enum) or value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    return (type(value).__name__, _dump(vars(value)) if hasattr(value, "__dict__") else repr(value))


def _refreshed_like_a_whole_read(registry) -> None:
    """Refresh (as after a write in another process) and compare with a whole read."""
    registry.refresh()
    whole = build_snapshot(selectors.serving_records())
    assert list(registry.models) == list(whole)  # the same models, in name order
    assert _dump(registry.models) == _dump(whole)


def _version(name: str, number: int) -> ModelVersion:
    return ModelVersion.objects.get(model__name=name, number=number)


def test_each_kind_of_write_re_reads_only_its_model_and_serves_what_a_whole_read_would(registry):
    registry, source = registry
    root = accounts.user_create(username="root", password="Pw-for-tests-123", superuser=True)
    a = RegisteredModel.objects.get(name="a")
    untouched = registry.models["b"]
    writes = [
        lambda: routes.label_set(model=a, name="stable", number=1, actor=root),
        lambda: routes.label_set(model=a, name="canary", number=2, actor=root),
        lambda: routes.traffic_set(model=a, weights={"stable": 90, "canary": 10}, actor=root),
        lambda: routes.traffic_set(model=a, weights={}, actor=root),
        lambda: (
            shadow.shadow_set(model=a, number=1, percent=50.0, actor=root)
            if registry.models["a"].default.number != 1
            else None
        ),
        lambda: shadow.shadow_clear(model=a, actor=root),
        lambda: routes.label_delete(model=a, name="canary", actor=root),
        lambda: model_services.model_update(model=a, actor=root, description="changed"),
        lambda: model_services.model_set_policy(model=a, policy="all", actor=root),
        lambda: model_services.model_set_payload_logging(model=a, rate=0.5, max_bytes=1024, actor=root),
        lambda: model_services.model_set_loaded(model=a, loaded=False, actor=root),
        lambda: model_services.model_set_loaded(model=a, loaded=True, actor=root),
        lambda: states.transition(version=_version("a", 1), change=states.DELETE, actor=root),
    ]
    for write in writes:
        source.reads.clear()
        write()
        _refreshed_like_a_whole_read(registry)
        assert source.reads in ([["a"]], []), source.reads  # [] : a write that changed nothing
    assert registry.models["b"] is untouched  # never rebuilt
    assert list(registry.models["a"].versions) == [2]


def test_a_new_model_and_a_deleted_one_keep_the_snapshot_in_name_order(registry, tmp_path):
    registry, source = registry
    root = accounts.user_create(username="root", password="Pw-for-tests-123", superuser=True)
    team = accounts.team_get_or_create(name="ml", actor=root)
    registry.refresh()  # the user and the team: access, read whole (signals name no model)
    source.reads.clear()
    model_services.model_create(name="aa", team=team, actor=root, description="")
    _refreshed_like_a_whole_read(registry)
    assert list(registry.models) == ["a", "aa", "b", "c"] and source.reads == [["aa"]]
    source.reads.clear()
    model_services.model_delete(model=RegisteredModel.objects.get(name="b"), actor=root)
    _refreshed_like_a_whole_read(registry)
    assert "b" not in registry.models and all(read == ["b"] for read in source.reads)


def test_a_token_rebuilds_nothing_and_an_unnamed_write_reads_every_model(registry):
    registry, source = registry
    user = accounts.user_create(username="u", password="Pw-for-tests-123")
    stamp, before = stamp_get(), registry.models
    source.reads.clear()
    accounts.token_create(user=user, name="t")  # this process follows its own writes at once
    assert stamp_get() == stamp + 1 and registry._stamp == stamp + 1
    assert registry.models is before and source.reads == []
    force_state(_version("c", 1), "FAILED", "broken")  # bump_stamp() naming no model
    _refreshed_like_a_whole_read(registry)
    assert source.reads == [None] and not registry.models["c"].versions[1].serving


def test_an_ensemble_or_a_model_it_runs_is_read_whole(tmp_path):
    root = tmp_path / "repo"
    m.write_model(root, "double", m.affine(2.0, 0.0))
    m.write_model(root, "other", m.affine(1.0, 0.0))
    pipeline = root / "pipeline"
    (pipeline / "1").mkdir(parents=True)
    tensor = '{ name: "%s" data_type: TYPE_FP32 dims: [ -1, 4 ] }'
    config = _ensemble("pipeline", tensor % "IN", tensor % "OUT", [("double", 1, {"x": "IN"}, {"y": "OUT"})])
    (pipeline / "config.pbtxt").write_text(config)
    import_repository(root)
    assert RegisteredModel.objects.get(name="pipeline").versions.get().state == "READY"
    source = _Counting()
    registry = ModelRegistry(source, poll_seconds=0)
    registry.start()
    try:
        admin = accounts.user_create(username="root", password="Pw-for-tests-123", superuser=True)
        source.reads.clear()
        routes.label_set(model=RegisteredModel.objects.get(name="double"), name="stable", number=1, actor=admin)
        _refreshed_like_a_whole_read(registry)
        assert source.reads == [None]  # a step of an ensemble: its state follows
        source.reads.clear()
        routes.label_set(model=RegisteredModel.objects.get(name="other"), name="stable", number=1, actor=admin)
        _refreshed_like_a_whole_read(registry)
        assert source.reads == [["other"]]
    finally:
        registry.stop()


def test_changed_models_knows_only_what_every_write_named(registry):
    start = stamp_get()
    bump_stamp(changed=["x", "y"])
    bump_stamp(changed=[])
    assert changed_models(start, start + 2) == {"x", "y"}
    assert changed_models(start + 1, start + 2) == frozenset()
    assert changed_models(start + 2, start + 2) == frozenset()
    bump_stamp()  # names none
    assert changed_models(start, start + 3) is None and changed_models(start + 3, start + 3) == frozenset()
    assert changed_models(start, start + KEEP_CHANGES) is None  # too far behind: read whole
    assert RegistryChange.objects.filter(counter=start + 1).count() == 2


def test_the_token_scopes_listener_hears_only_changes_of_who_may_call_what(registry):
    registry, _source = registry
    root = accounts.user_create(username="root", password="Pw-for-tests-123", superuser=True)
    team = accounts.team_get_or_create(name="ml", actor=root)
    heard, every = [], []
    registry.add_listener(lambda snapshot: heard.append(sorted(snapshot)), teams_only=True)
    registry.add_listener(lambda snapshot: every.append(sorted(snapshot)))
    a = RegisteredModel.objects.get(name="a")
    routes.label_set(model=a, name="stable", number=1, actor=root)  # a record, the same team
    model_services.model_update(model=a, actor=root, description="d")
    assert heard == [] and len(every) == 2
    model_services.model_create(name="new", team=team, actor=root)  # a model the scopes do not know
    assert heard == [["a", "b", "c", "new"]]
    accounts.token_create(user=root, name="t")  # no model's record
    model_services.model_delete(model=RegisteredModel.objects.get(name="c"), actor=root)
    assert len(heard) >= 3 and heard[-1] == ["a", "b", "new"] and len(every) >= len(heard) + 2


def test_a_failing_listener_is_logged_as_itself_and_the_next_one_still_hears(registry, caplog):
    registry, _source = registry
    heard = []

    def broken(snapshot):
        raise TypeError("a listener's own bug")

    registry.add_listener(broken)
    registry.add_listener(lambda snapshot: heard.append(len(snapshot)))
    root = accounts.user_create(username="root", password="Pw-for-tests-123", superuser=True)
    routes.label_set(model=RegisteredModel.objects.get(name="a"), name="stable", number=1, actor=root)
    assert heard and heard[-1] == 3
    failures = [r for r in caplog.records if "registry listener" in r.getMessage()]
    assert failures and "broken" in failures[0].getMessage() and failures[0].exc_info[0] is TypeError
    assert not [r for r in caplog.records if "unreachable" in r.getMessage()]  # not taken for an outage
    assert registry.database.failures == 0
