"""Model store services: uploads, validation, version policy, labels, retire,
delete, audit (runs on SQLite and on PostgreSQL)."""

from __future__ import annotations

import hashlib

import pytest
from django.db import transaction

from models_store import audit, errors, storage
from models_store.intake import services as intake
from models_store.intake import validating
from models_store.intake.repository import import_repository
from models_store.intake.uploads import UploadRefused
from models_store.models import AuditEvent, ModelVersion, RegisteredModel, RegistryStamp
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import routes, states, versions
from tests.support import onnx_models as m
from tests.support.onnx_models import external_data_model, failing_model
from tests.support.store import person, stage

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def repo(tmp_path):
    """A model repository directory (beside, not around, the test's MODEL_STORE_DIR)."""
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
def alice():
    return person("alice", "ml")


def _team(user):
    return user.teams.get()


def _store_files():
    """Every file under MODEL_STORE_DIR, relative, sorted, but for staged
    uploads (removing those is the upload handler's job, tested elsewhere)."""
    root = storage.store_root()
    files = (str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return sorted(f for f in files if not f.startswith(".tmp/"))


def _stamp() -> int:
    return RegistryStamp.objects.get(pk=1).counter


def _create_meanwhile(monkeypatch, name: str, team, actor) -> None:
    """Make the next first upload of ``name`` lose a race: the model is
    created (as by a parallel upload) after that upload looked for it, and
    the upload's own look inside its transaction misses it once too, so that
    its create hits the unique constraint."""
    commit_staged = storage.commit_staged
    misses = []

    def racing_commit(*args, **kwargs):
        RegisteredModel.objects.create(name=name, team=team, created_by=actor)
        misses.append(True)
        return commit_staged(*args, **kwargs)

    real_filter = RegisteredModel.objects.filter

    def filter_missing_once(*args, **kwargs):
        if misses and kwargs.get("name") == name:
            misses.clear()
            return RegisteredModel.objects.none()
        return real_filter(*args, **kwargs)

    monkeypatch.setattr(storage, "commit_staged", racing_commit)
    monkeypatch.setattr(RegisteredModel.objects, "filter", filter_missing_once)


def test_a_first_upload_that_loses_the_race_becomes_a_version_of_the_winner(alice, monkeypatch):
    _create_meanwhile(monkeypatch, "raced", _team(alice), alice)
    version = intake.version_upload(
        model_name="raced", staged=stage(m.affine(2.0, 1.0)), actor=alice, team=_team(alice)
    )
    assert (version.model.name, version.number) == ("raced", 1)
    assert RegisteredModel.objects.count() == 1 and version.model.team == _team(alice)
    assert ModelVersion.objects.get(pk=version.pk).state == "READY"


def test_a_first_upload_racing_another_team_is_refused(alice, monkeypatch):
    bob = person("bob", "vision")
    _create_meanwhile(monkeypatch, "raced", _team(bob), bob)
    with pytest.raises(errors.RegistryError, match="belongs to vision, not team ml"):
        intake.version_upload(model_name="raced", staged=stage(m.affine(2.0, 1.0)), actor=alice, team=_team(alice))
    assert not ModelVersion.objects.exists() and _store_files() == []


def test_upload_creates_model_and_a_validated_version(alice):
    payload = m.affine(2.0, 1.0)
    version = intake.version_upload(
        model_name="affine", staged=stage(payload, "affine.onnx"), actor=alice, team=_team(alice)
    )
    version.refresh_from_db()
    sha = hashlib.sha256(payload).hexdigest()
    assert (version.number, version.state, version.reason) == (1, "READY", "")
    assert (version.sha256, version.size) == (sha, len(payload))
    assert version.artifact == f"affine/{sha}/model.onnx"
    assert storage.artifact_path(version.artifact).read_bytes() == payload
    assert version.inputs == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert version.outputs == [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]
    assert version.log[0].startswith("validated on ")  # where it ran (embedded mode)
    assert version.log[1] == "ONNX checker passed"
    assert version.log[-1].startswith("warm-up inference on zero inputs")
    assert version.uploaded_by == alice and version.source == "upload: affine.onnx"
    model = version.model
    assert (model.team.name, model.created_by) == ("ml", alice)
    assert _store_files() == [f"affine/{sha}/model.onnx"]  # the staging directory is gone
    actions = list(AuditEvent.objects.order_by("id").values_list("actor_name", "action", "version_number"))
    assert actions == [
        ("system", "user.create", None),
        ("system", "team.create", None),
        ("system", "team.join", None),
        ("alice", "model.create", None),
        ("alice", "version.upload", 1),
        ("system", "version.ready", 1),
    ]


def test_validation_goes_through_validating(alice, monkeypatch):
    seen = []
    original = states.transition

    def spy(*, version, change, **kwargs):
        seen.append(change)
        return original(version=version, change=change, **kwargs)

    monkeypatch.setattr(states, "transition", spy)
    intake.version_upload(model_name="a", staged=stage(m.affine(1, 1)), actor=alice, team=_team(alice))
    assert seen == ["validate", "ready"]
    assert ModelVersion.objects.get().state == "READY"


def test_new_versions_are_numbered_by_the_registry(alice):
    team = _team(alice)
    numbers = [
        intake.version_upload(model_name="a", staged=stage(m.affine(k, 1)), actor=alice, team=team).number
        for k in (1, 2, 3)
    ]
    assert numbers == [1, 2, 3]
    versions.version_delete(version=ModelVersion.objects.get(number=3), actor=alice)
    assert (
        intake.version_upload(model_name="a", staged=stage(m.affine(9, 1)), actor=alice).number == 4
    )  # 3 is never reused


def test_same_bytes_twice_is_a_duplicate_and_changes_nothing(alice):
    payload = m.affine(1, 1)
    intake.version_upload(model_name="a", staged=stage(payload), actor=alice, team=_team(alice))
    before = (_store_files(), _stamp(), AuditEvent.objects.count())
    again = stage(payload)
    with pytest.raises(errors.DuplicateVersion, match=r"already has these bytes .* as version 1 \(READY\)"):
        intake.version_upload(model_name="a", staged=again, actor=alice)
    assert ModelVersion.objects.count() == 1
    assert (_store_files(), _stamp(), AuditEvent.objects.count()) == before
    assert again.path.exists()  # the caller's handler discards it


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "the file is empty"),
        (b"this is not an onnx model", "not an ONNX model"),
        (b"\x08\x07", "not an ONNX model: the file holds no ONNX graph"),
        (external_data_model("../../etc/passwd"), "references external data at '../../etc/passwd', outside"),
        (external_data_model("/etc/passwd"), "references external data at '/etc/passwd', outside"),
        (external_data_model("weights.bin"), "missing external data file 'weights.bin'"),
        (
            external_data_model("model.onnx"),
            "references model.onnx as external data, which is not one of the data files",
        ),
    ],
    ids=["empty", "text", "no-graph", "dotdot", "absolute", "missing", "self"],
)
def test_refused_uploads_leave_nothing(alice, payload, message):
    intake.version_upload(model_name="keep", staged=stage(m.affine(1, 1)), actor=alice, team=_team(alice))
    before = (_store_files(), _stamp(), AuditEvent.objects.count())
    with pytest.raises(UploadRefused, match=message):
        intake.version_upload(model_name="fresh", staged=stage(payload), actor=alice, team=_team(alice))
    with pytest.raises(UploadRefused, match=message):
        intake.version_upload(model_name="keep", staged=stage(payload), actor=alice)
    assert not RegisteredModel.objects.filter(name="fresh").exists()
    assert ModelVersion.objects.count() == 1
    assert (_store_files(), _stamp(), AuditEvent.objects.count()) == before


def test_a_model_that_fails_validation_is_kept_failed_with_its_reason(alice):
    good = intake.version_upload(model_name="a", staged=stage(m.affine(1, 1)), actor=alice, team=_team(alice))
    bad = intake.version_upload(model_name="a", staged=stage(failing_model()), actor=alice)
    bad.refresh_from_db()
    assert bad.state == "FAILED"
    assert bad.reason.startswith("ONNX checker:") and "NoSuchOperator" in bad.reason
    assert bad.log[-1] == f"failed: {bad.reason}"
    assert list(selectors.serving(bad.model).served) == [
        good.number
    ]  # a failed version never takes the serving one offline
    assert AuditEvent.objects.filter(action="version.failed", version_number=2).count() == 1


def test_validation_crash_fails_the_version_instead_of_leaving_it_validating(alice, monkeypatch):
    def boom(*args, **kwargs):
        raise MemoryError("simulated")

    monkeypatch.setattr(validating.validation, "validate_artifact", boom)
    version = intake.version_upload(model_name="a", staged=stage(m.affine(1, 1)), actor=alice, team=_team(alice))
    version.refresh_from_db()
    assert version.state == "FAILED"
    assert version.reason == "internal error during validation (MemoryError); see the server log"


def test_upload_to_an_imported_model_is_checked_against_its_config(alice, repo):
    config = 'max_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    m.write_model(repo, "batched", m.affine(2, 1), config=config)
    import_repository(repo, team="ml")
    ok = intake.version_upload(model_name="batched", staged=stage(m.affine(3, 1)), actor=alice)
    wrong = intake.version_upload(model_name="batched", staged=stage(m.affine(3, 1, width=5)), actor=alice)
    ok.refresh_from_db(), wrong.refresh_from_db()
    assert ok.state == "READY"
    assert wrong.state == "FAILED" and "dims of input 'x' [-1, 4]" in wrong.reason


def test_a_row_that_cannot_be_written_takes_its_artifact_with_it(alice, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(states, "version_create", fail)
    with pytest.raises(RuntimeError):
        intake.version_upload(model_name="a", staged=stage(m.affine(1, 1)), actor=alice, team=_team(alice))
    assert not RegisteredModel.objects.exists()  # the model created in the same transaction is rolled back
    assert _store_files() == []


def test_upload_without_a_team_for_a_new_model_is_refused(alice):
    with pytest.raises(errors.RegistryError, match="give a team to create it"):
        intake.version_upload(model_name="new", staged=stage(m.affine(1, 1)), actor=alice)
    with pytest.raises(errors.RegistryError, match="A model name starts with"):
        intake.version_upload(model_name="../x", staged=stage(m.affine(1, 1)), actor=alice, team=_team(alice))


# -- version policy, labels, retire ------------------------------------------------
@pytest.fixture
def three_versions(alice):
    """Model "p": versions 1 and 3 READY, 2 FAILED."""
    team = _team(alice)
    for payload in (m.affine(1, 1), failing_model(), m.affine(3, 1)):
        intake.version_upload(model_name="p", staged=stage(payload), actor=alice, team=team)
    return RegisteredModel.objects.get(name="p")


def test_version_policies(three_versions, alice):
    model = three_versions
    assert list(selectors.serving(model).served) == [3]
    model_services.model_set_policy(model=model, policy="all", actor=alice)
    assert list(selectors.serving(RegisteredModel.objects.get(pk=model.pk)).served) == [3, 1]
    model_services.model_set_policy(model=model, policy="specific", specific=[1], actor=alice)
    model.refresh_from_db()
    assert (model.version_policy, model.specific_versions, list(selectors.serving(model).served)) == (
        "specific",
        [1],
        [1],
    )
    model_services.model_set_policy(model=model, policy="latest", latest=2, actor=alice)
    model.refresh_from_db()
    assert list(selectors.serving(model).served) == [3, 1]
    event = AuditEvent.objects.filter(action="model.policy").latest("id")
    assert (event.actor_name, event.detail) == ("alice", {"policy": "latest", "latest": 2, "specific": []})


@pytest.mark.parametrize(
    ("policy", "latest", "specific", "message"),
    [
        ("specific", 1, [2], r"would serve no version of 'p': it lists 2 \(FAILED\); READY versions: 1, 3"),
        ("specific", 1, [7], "model 'p' has no version 7"),
        ("specific", 1, [], "lists at least one version"),
        ("latest", 0, [], "serves at least 1 version"),
        ("newest", 1, [], "unknown version policy 'newest'"),
    ],
)
def test_a_policy_that_serves_nothing_is_refused(three_versions, alice, policy, latest, specific, message):
    stamp = _stamp()
    with pytest.raises(errors.RegistryError, match=message):
        model_services.model_set_policy(
            model=three_versions, policy=policy, latest=latest, specific=specific, actor=alice
        )
    three_versions.refresh_from_db()
    assert (three_versions.version_policy, _stamp()) == ("latest", stamp)


def test_labels_point_at_ready_versions_only(three_versions, alice):
    model = three_versions
    routes.label_set(model=model, name="stable", number=1, actor=alice)
    assert {label.name: label.version.number for label in model.labels.all()} == {"stable": 1}
    with pytest.raises(errors.RegistryError, match="version 2 of 'p' is FAILED"):
        routes.label_set(model=model, name="canary", number=2, actor=alice)
    with pytest.raises(errors.RegistryError, match="has no version 9"):
        routes.label_set(model=model, name="canary", number=9, actor=alice)
    with pytest.raises(errors.RegistryError, match="A version label holds"):
        routes.label_set(model=model, name="bad label", number=1, actor=alice)
    assert routes.label_delete(model=model, name="stable", actor=alice) is True
    assert routes.label_delete(model=model, name="stable", actor=alice) is False
    assert list(
        AuditEvent.objects.filter(action__startswith="label.").order_by("id").values_list("action", flat=True)
    ) == [
        "label.set",
        "label.delete",
    ]


def test_retire_and_restore(three_versions, alice):
    model = three_versions
    v3 = model.versions.get(number=3)
    routes.label_set(model=model, name="stable", number=3, actor=alice)
    with pytest.raises(errors.RegistryError, match="stable point at version 3; move or delete them first"):
        versions.version_retire(version=v3, actor=alice)
    routes.label_delete(model=model, name="stable", actor=alice)
    versions.version_retire(version=v3, actor=alice)
    v3.refresh_from_db()
    assert v3.state == "UNAVAILABLE" and v3.reason.startswith("retired by alice on ")
    assert list(selectors.serving(RegisteredModel.objects.get(pk=model.pk)).served) == [1]
    with pytest.raises(errors.RegistryError, match="only a READY version can be retired; version 2 is FAILED"):
        versions.version_retire(version=model.versions.get(number=2), actor=alice)
    versions.version_restore(version=v3, actor=alice)
    v3.refresh_from_db()
    assert (v3.state, v3.reason) == ("READY", "")
    with pytest.raises(errors.RegistryError, match="only a retired version can be restored"):
        versions.version_restore(version=v3, actor=alice)


def test_delete_removes_the_artifact_after_commit_and_records_labels(three_versions, alice):
    model = three_versions
    v1 = model.versions.get(number=1)
    routes.label_set(model=model, name="old", number=1, actor=alice)
    path = storage.artifact_path(v1.artifact)
    with transaction.atomic():
        versions.version_delete(version=v1, actor=alice)
        assert path.exists()  # not before the commit
    assert not path.exists() and not path.parent.exists()
    event = AuditEvent.objects.get(action="version.delete")
    assert (event.version_number, event.detail["labels"], event.detail["sha256"]) == (1, ["old"], v1.sha256)


def test_every_write_bumps_the_stamp(three_versions, alice):
    model = three_versions
    for write in (
        lambda: model_services.model_update(model=model, actor=alice, description="iris"),
        lambda: model_services.model_set_policy(model=model, policy="all", actor=alice),
        lambda: routes.label_set(model=model, name="s", number=1, actor=alice),
        lambda: routes.label_delete(model=model, name="s", actor=alice),
        lambda: versions.version_retire(version=model.versions.get(number=3), actor=alice),
        lambda: versions.version_restore(version=model.versions.get(number=3), actor=alice),
        lambda: versions.version_delete(version=model.versions.get(number=2), actor=alice),
    ):
        before = _stamp()
        write()
        assert _stamp() == before + 1


def test_model_upsert_keeps_a_changed_policy_until_the_config_changes(repo):
    m.write_model(repo, "c", m.affine(1, 1), config="version_policy: { all: {} }")
    import_repository(repo)
    model = RegisteredModel.objects.get(name="c")
    model_services.model_set_policy(model=model, policy="latest", latest=1)
    import_repository(repo)  # e.g. `serve` restarting
    assert RegisteredModel.objects.get(name="c").version_policy == "latest"
    (repo / "c" / "config.pbtxt").write_text("version_policy: { all: {} }\nmax_batch_size: 4")
    import_repository(repo)
    assert RegisteredModel.objects.get(name="c").version_policy == "all"


def test_imported_models_get_the_repository_team_or_none(repo, settings):
    m.write_model(repo, "a", m.affine(1, 1))
    import_repository(repo)
    assert RegisteredModel.objects.get(name="a").team is None  # operator-owned
    m.write_model(repo, "b", m.affine(1, 2))
    settings.REPOSITORY_TEAM = "platform"
    import_repository(repo)
    teams = dict(RegisteredModel.objects.values_list("name", "team__name"))
    assert teams == {"a": "platform", "b": "platform"}  # a team-less model is adopted
    import_repository(repo, team="other")
    assert dict(RegisteredModel.objects.values_list("name", "team__name")) == teams  # never moved between teams
    events = AuditEvent.objects.filter(action="version.import").values_list("actor_name", "model_name", flat=False)
    assert sorted(events) == [("system", "a"), ("system", "b")]


def test_model_delete_removes_every_version_and_artifact(three_versions, alice):
    paths = [storage.artifact_path(v.artifact) for v in three_versions.versions.all()]
    model_services.model_delete(model=three_versions, actor=alice)
    assert not RegisteredModel.objects.exists()
    assert not any(p.exists() for p in paths)
    assert AuditEvent.objects.filter(action="version.delete").count() == 3


def test_audit_record_without_actor_is_the_system():
    event = audit.record(None, "custom.thing", detail_key="v")
    assert (event.actor, event.actor_name, event.model_name, event.detail) == (
        None,
        "system",
        "",
        {"detail_key": "v"},
    )
