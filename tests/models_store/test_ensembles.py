"""Ensembles in the registry: imported from a repository, uploaded through
the management API as a config alone, pinned, checked, and guarded (409)."""

from __future__ import annotations

import pytest

from inference.serving.snapshot import build_snapshot
from models_store import errors, storage
from models_store.accounts import services as accounts
from models_store.intake.repository import import_repository
from models_store.models import AuditEvent, ModelVersion, RegisteredModel
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.serving import StoreRegistrySource
from models_store.stamp import bump_stamp
from tests.models_store.test_api import Api, _error
from tests.support import onnx_models as m
from tests.support.repository import ENSEMBLES, _ensemble, write_ensembles
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    write_ensembles(root)
    return root


@pytest.fixture
def alice_api():
    return Api(accounts.token_create(user=person("alice", "ml"), name="script")[1])


@pytest.fixture
def bob_api():
    return Api(accounts.token_create(user=person("bob", "vision"), name="script")[1])


@pytest.fixture
def ops_api():
    user = person("ops", superuser=True)
    return Api(accounts.token_create(user=user, name="script")[1])


def _upload_config(api: Api, model: str, config: str, **fields):
    return api.client.post(f"/api/models/{model}/versions/", {"config": config, **fields}, **api.auth)


def test_import_pins_the_serving_versions_and_is_idempotent(repo):
    results = {(r.model, r.directory): r for r in import_repository(repo)}
    for name in ENSEMBLES:
        assert results[(name, "1")].outcome == "created", results[(name, "1")]
    version = ModelVersion.objects.get(model__name="ens_pipeline", number=1)
    assert version.state == "READY" and version.platform == "ensemble" and version.artifact == ""
    assert version.model.platform == "ensemble"
    steps = version.properties["ensemble"]["steps"]
    assert [(s["model_name"], s["model_version"], s["configured_version"]) for s in steps] == [
        ("ens_preprocess", 1, -1),
        ("ens_classifier", 1, -1),
        ("ens_postprocess", 1, 1),
    ]
    assert version.inputs == [{"name": "RAW", "datatype": "FP32", "shape": [-1, 4]}]
    assert version.outputs == [
        {"name": "PROBABILITIES", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "LABEL", "datatype": "INT64", "shape": [-1]},
    ]
    again = {(r.model, r.directory): r.outcome for r in import_repository(repo)}
    assert all(again[(name, "1")] == "unchanged" for name in ENSEMBLES)


def test_upload_through_the_api_pins_minus_one_to_the_version_serving_then(alice_api):
    for name, payload in (("pre", m.standardize()), ("clf", m.linear_classifier())):
        assert alice_api.upload(name, payload, team="ml").status_code == 201
    assert alice_api.upload("clf", m.linear_classifier(batch="B"), team="ml").status_code == 201  # version 2 serves
    config = _ensemble(
        "pipe",
        '{ name: "RAW" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "LOGITS" data_type: TYPE_FP32 dims: [ -1, 3 ] }',
        [("pre", -1, {"raw": "RAW"}, {"features": "f"}), ("clf", -1, {"features": "f"}, {"logits": "LOGITS"})],
    )
    response = _upload_config(alice_api, "pipe", config, team="ml")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "READY" and body["number"] == 1
    version = ModelVersion.objects.get(model__name="pipe")
    assert [(s["model_name"], s["model_version"]) for s in version.properties["ensemble"]["steps"]] == [
        ("pre", 1),
        ("clf", 2),
    ]
    event = AuditEvent.objects.filter(action="version.upload", model_name="pipe").get()
    assert event.actor_name == "alice"
    # the same plan again is a duplicate; an ONNX file for an ensemble model is refused
    assert "already has these bytes" in _error(_upload_config(alice_api, "pipe", config), 409)
    assert "is an ensemble" in _error(alice_api.upload("pipe", m.standardize()), 409)
    # a pinned version serves whatever the policy says (latest 1 serves only version 2 of clf otherwise)
    assert alice_api.upload("pre", m.standardize(batch=("B",)), team="ml").status_code == 201
    assert selectors.serving(RegisteredModel.objects.get(name="pre")).served == (2, 1)


@pytest.mark.parametrize(
    "steps, status, message",
    [
        ([("nope", -1, {"raw": "RAW"}, {"features": "OUT"})], 400, "step 1: unknown model 'nope'"),
        ([("pre", 5, {"raw": "RAW"}, {"features": "OUT"})], 409, "step 1: model 'pre' has no version 5"),
        ([("pre", -1, {"wrong": "RAW"}, {"features": "OUT"})], 400, "has no input 'wrong' (inputs: raw)"),
        ([("pre", -1, {"raw": "RAW"}, {"other": "OUT"})], 400, "has no output 'other' (outputs: features)"),
        (
            [("pre", -1, {"raw": "RAW"}, {"features": "t"}), ("pre", -1, {"raw": "t2"}, {"features": "OUT"})],
            400,
            "step 2 (model 'pre') reads 't2' (into its input 'raw'), which is neither",
        ),
        ([("pre", -1, {"raw": "RAW"}, {"features": "t"})], 400, "no step writes the ensemble output(s) OUT"),
        (
            [("labels", -1, {"logits": "RAW"}, {"label": "OUT"})],
            400,
            "input 'logits' is FP32 [-1, 3], but 'RAW' (the ensemble's input) is FP32 [-1, 4]",
        ),
        (
            [("pre", -1, {"raw": "RAW"}, {"features": "t"}), ("labels", -1, {"logits": "t"}, {"label": "OUT"})],
            400,
            "input 'logits' is FP32 [-1, 3], but 't' (output 'features' of step 1) is FP32 [-1, 4]",
        ),
        ([("join", -1, {"a": "RAW"}, {"sum": "OUT"})], 400, "(model 'join' version 1): input(s) b not mapped"),
        (
            [("pre", -1, {"raw": "RAW"}, {"features": "OUT"}), ("pre", -1, {"raw": "RAW"}, {"features": "OUT"})],
            400,
            "step 2 (model 'pre') writes 'OUT', which step 1 writes too",
        ),
        ([("other_team", -1, {"x": "RAW"}, {"y": "OUT"})], 400, "step 1: unknown model 'other_team'"),
    ],
)
def test_malformed_ensembles_are_refused_naming_the_step(alice_api, bob_api, steps, status, message):
    assert alice_api.upload("pre", m.standardize(), team="ml").status_code == 201
    assert alice_api.upload("labels", m.softmax_argmax(), team="ml").status_code == 201
    assert alice_api.upload("join", m.add_pair(), team="ml").status_code == 201
    assert bob_api.upload("other_team", m.affine(1.0, 0.0), team="vision").status_code == 201
    config = _ensemble(
        "e",
        '{ name: "RAW" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "OUT" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        steps,
    )
    error = _error(_upload_config(alice_api, "e", config, team="ml"), status)
    assert message in error
    assert not RegisteredModel.objects.filter(name="e").exists()


def test_deleting_retiring_unloading_what_a_ready_ensemble_runs_is_refused(repo, ops_api):
    import_repository(repo)
    for path, method in (
        ("/api/models/ens_postprocess/versions/1/", "delete"),
        ("/api/models/ens_postprocess/versions/1/retire", "post"),
        ("/api/models/ens_postprocess/", "delete"),
    ):
        response = getattr(ops_api.client, method)(path, **ops_api.auth)
        error = _error(response, 409)
        assert "step 3 of ensemble 'ens_pipeline' (version 1, READY)" in error, error
    model = RegisteredModel.objects.get(name="ens_preprocess")
    with pytest.raises(errors.Conflict, match="ensemble 'ens_diamond'"):
        model_services.model_set_loaded(model=model, loaded=False)
    assert ModelVersion.objects.get(model__name="ens_postprocess", number=1).state == "READY"
    # once the ensemble is unloaded, its composing versions may go
    model_services.model_set_loaded(model=RegisteredModel.objects.get(name="ens_pipeline"), loaded=False)
    assert ops_api.client.delete("/api/models/ens_postprocess/versions/1/", **ops_api.auth).status_code == 204
    # the ensemble's own version goes like any other (it has no artifact to remove)
    assert ops_api.client.delete("/api/models/ens_stats/versions/1/", **ops_api.auth).status_code == 204


def test_the_admin_refuses_deleting_what_a_ready_ensemble_runs_and_names_it(repo, monkeypatch):
    """The Django admin's delete pages list the ensembles as what protects a
    version or a model (Django's own refusal: nothing deleted, no 500); a
    refusal found only when the delete runs is an error message."""
    from django.test import Client

    import_repository(repo)
    admin = Client()
    admin.force_login(person("root", superuser=True))
    version = ModelVersion.objects.get(model__name="ens_preprocess", number=1)
    model = version.model
    pages = (
        (f"/admin/models_store/modelversion/{version.pk}/delete/", {"post": "yes"}),
        ("/admin/models_store/modelversion/", {"action": "delete_selected", "_selected_action": [version.pk],
                                               "post": "yes"}),
        (f"/admin/models_store/registeredmodel/{model.pk}/delete/", {"post": "yes"}),
        ("/admin/models_store/registeredmodel/", {"action": "delete_selected", "_selected_action": [model.pk],
                                                  "post": "yes"}),
    )  # fmt: skip
    for path, form in pages:
        response = admin.post(path, form)
        assert response.status_code == 200, (path, response.status_code)
        text = response.content.decode()
        assert "would require deleting the following protected related objects" in text, path
        assert "step 1 of ensemble &#x27;ens_pipeline&#x27; (version 1, READY)" in text, path
    assert ModelVersion.objects.filter(model__name="ens_preprocess", number=1, state="READY").exists()
    assert not AuditEvent.objects.filter(action="version.delete", model_name="ens_preprocess").exists()

    # the ensemble became READY between the confirmation page and the delete: refused, rolled back, said
    from django.contrib.admin import ModelAdmin

    from models_store.admin import ModelVersionAdmin

    monkeypatch.setattr(ModelVersionAdmin, "get_deleted_objects", ModelAdmin.get_deleted_objects)  # saw none
    response = admin.post(pages[1][0], pages[1][1], follow=True)
    assert response.status_code == 200
    assert "is step 1 of ensemble" in response.content.decode()
    assert ModelVersion.objects.filter(model__name="ens_preprocess", number=1, state="READY").exists()


def test_cleanup_store_leaves_ensembles_alone(repo, capsys):
    """An ensemble version has no artifact: not a missing one, and its composing models' files stay."""
    from django.core.management import call_command

    import_repository(repo)
    call_command("cleanup_store", "--min-age", "0")
    assert capsys.readouterr().out.splitlines()[-1] == "0 orphan(s) removed, 0 missing artifact(s)"
    assert all(storage.artifact_path(v.artifact).is_file() for v in ModelVersion.objects.exclude(artifact=""))


def test_a_step_with_sequence_batching_is_refused(alice_api):
    """A step's request belongs to no sequence: such a model cannot be a step."""
    assert alice_api.upload("seq", m.affine(1.0, 0.0), team="ml").status_code == 201
    RegisteredModel.objects.filter(name="seq").update(
        config={"sequence_batching": {"max_sequence_idle_microseconds": 5}}
    )
    config = _ensemble(
        "e",
        '{ name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [("seq", -1, {"x": "X"}, {"y": "Y"})],
    )
    error = _error(_upload_config(alice_api, "e", config, team="ml"), 400)
    assert error == "step 1: model 'seq' has sequence batching; it cannot be an ensemble's step"


def test_the_management_api_and_the_serving_registry_agree_on_an_ensemble_whose_step_stops(repo, ops_api):
    """An ensemble's version serves only while every version it pins serves:
    the serving registry's snapshot and the management API say so alike, with
    the same reason (one computation: inference.serving.state.serving_states)."""
    import_repository(repo)

    def registry_entry():
        return build_snapshot(StoreRegistrySource().models())["ens_pipeline"].versions[1]

    def api_version():
        return ops_api.get("/api/models/ens_pipeline/versions/1/").json()

    assert registry_entry().serving and api_version()["serving"] is True
    # A step's model unloaded behind the services' back (the admin's "loaded" box): they refuse to.
    RegisteredModel.objects.filter(name="ens_preprocess").update(loaded=False)
    bump_stamp()
    entry = registry_entry()
    reason = "step 1: version 1 of model 'ens_preprocess' does not serve (the model is unloaded"
    assert not entry.serving and entry.reason.startswith(reason), entry.reason
    assert api_version()["serving"] is False
    assert [v["serving"] for v in ops_api.get("/api/models/ens_pipeline/").json()["versions"]] == [False]
    assert not selectors.serving(RegisteredModel.objects.get(name="ens_pipeline")).serves(1)
    assert selectors.serving(RegisteredModel.objects.get(name="ens_pipeline")).reason(1, "READY") == entry.reason


def _chain(name: str, steps: int, model: str = "step") -> str:
    """The config.pbtxt of an ensemble running ``model`` (y = x + 1) ``steps`` times in a row."""
    tensors = ["X", *(f"t{i}" for i in range(1, steps)), "Y"]
    return _ensemble(
        name,
        '{ name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [(model, -1, {"x": tensors[i]}, {"y": tensors[i + 1]}) for i in range(steps)],
    )


def test_an_ensemble_of_more_steps_than_the_limit_is_refused_everywhere(alice_api, tmp_path, settings):
    """ENSEMBLE_MAX_STEPS (here 5): an upload through the management API and
    the web UI answers 400 naming the limit, a repository import fails that
    directory, and nothing is created; 5 steps are accepted."""
    from django.test import Client

    from tests.models_store.test_views import _post
    from tests.support.store import PASSWORD

    settings.ENSEMBLE_MAX_STEPS = 5
    assert alice_api.upload("step", m.affine(1.0, 1.0), team="ml").status_code == 201
    refusal = "the ensemble has 6 steps; at most 5 are allowed (ENSEMBLE_MAX_STEPS)"
    assert _error(_upload_config(alice_api, "long", _chain("long", 6), team="ml"), 400) == refusal

    browser = Client(enforce_csrf_checks=True)
    assert browser.login(username="alice", password=PASSWORD)
    page = _post(browser, "/upload/", {"name": "long", "team": "ml", "description": "", "config": _chain("long", 6)})
    assert page.status_code == 400 and refusal in page.content.decode()

    root = tmp_path / "repo"
    m.write_model(root, "step", m.affine(1.0, 1.0))
    (root / "long" / "1").mkdir(parents=True)
    (root / "long" / "config.pbtxt").write_text(_chain("long", 6))
    imported = {r.model: r for r in import_repository(root)}
    assert (imported["long"].outcome, imported["long"].message) == ("failed", refusal)
    assert not RegisteredModel.objects.filter(name="long").exists()

    response = _upload_config(alice_api, "five", _chain("five", 5), team="ml")
    assert response.status_code == 201, response.content
    assert len(ModelVersion.objects.get(model__name="five").properties["ensemble"]["steps"]) == 5


def test_data_files_without_a_model_file_are_refused_not_dropped(alice_api):
    import io

    data = io.BytesIO(b"\0" * 16)
    data.name = "weights.bin"
    config = 'platform: "ensemble"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    response = _upload_config(alice_api, "with-data", config, team="ml", data=data)
    assert _error(response, 400).startswith("data files (field 'data') without a model file")
    assert not RegisteredModel.objects.filter(name="with-data").exists()
