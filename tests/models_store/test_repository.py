"""Importing a Triton-style model repository (runs on SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command

from models_store.intake.repository import import_repository
from models_store.models import AuditEvent, ModelVersion, RegisteredModel
from models_store.registry import selectors
from models_store.storage import artifact_path
from tests.support import onnx_models as m

pytestmark = [pytest.mark.db, pytest.mark.django_db]


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    return path


def _by_key(results):
    return {(r.model, r.directory): r for r in results}


def test_import_creates_ready_versions_with_signature(repo):
    path = m.write_model(repo, "simple", m.add_sub("INT32"))
    (result,) = import_repository(repo)
    assert (result.outcome, result.version) == ("created", 1)
    version = ModelVersion.objects.get(model__name="simple", number=1)
    assert version.state == "READY" and version.reason == ""
    assert version.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert version.size == path.stat().st_size
    assert version.platform == "onnxruntime_onnx"
    assert version.inputs == [
        {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
    ]
    assert [o["name"] for o in version.outputs] == ["OUTPUT0", "OUTPUT1"]
    stored = artifact_path(version.artifact)
    assert stored.read_bytes() == path.read_bytes()
    assert version.artifact == f"simple/{version.sha256}/model.onnx"
    assert version.source == "import: simple/1"  # relative to the repository, never the server's path
    (event,) = AuditEvent.objects.filter(model_name="simple", action="version.import")
    assert event.detail["source"] == "import: simple/1"
    assert str(repo) not in json.dumps(event.detail)


def test_import_is_idempotent(repo):
    m.write_model(repo, "a", m.identity("FP32"))
    m.write_model(repo, "a", m.affine(1, 1), version=2)
    first = import_repository(repo)
    assert [r.outcome for r in first] == ["created", "created"]
    second = import_repository(repo)
    assert [(r.outcome, r.version) for r in second] == [("unchanged", 1), ("unchanged", 2)]
    assert ModelVersion.objects.filter(model__name="a").count() == 2


def test_changed_bytes_in_an_old_directory_get_the_next_number(repo):
    m.write_model(repo, "a", m.affine(1, 1), version=1)
    m.write_model(repo, "a", m.affine(1, 2), version=3)
    import_repository(repo)
    m.write_model(repo, "a", m.affine(5, 5), version=1)  # new bytes under an old number
    results = _by_key(import_repository(repo))
    assert results[("a", "1")].outcome == "created"
    assert results[("a", "1")].version == 4
    assert "registered as version 4" in results[("a", "1")].message
    assert list(selectors.version_list(RegisteredModel.objects.get(name="a")).values_list("number", flat=True)) == [
        4,
        3,
        1,
    ]


def test_broken_model_fails_with_reason_and_others_import(repo):
    m.write_model(repo, "good", m.identity("INT64"))
    m.write_model(repo, "bad", b"\x08\x01garbage")
    results = _by_key(import_repository(repo))
    assert results[("good", "1")].outcome == "created"
    assert results[("bad", "1")].outcome == "failed"
    bad = ModelVersion.objects.get(model__name="bad")
    assert bad.state == "FAILED"
    assert bad.reason.startswith(("not a readable ONNX model", "ONNX checker"))
    assert ModelVersion.objects.get(model__name="good").state == "READY"


def test_config_is_applied_and_checked(repo):
    m.write_model(
        repo,
        "batched",
        m.affine(2, 1),
        config="max_batch_size: 8\nversion_policy: { all: {} }\n"
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "instance_group [ { kind: KIND_CPU count: 2 } ]",
    )
    m.write_model(repo, "wrong_dims", m.affine(2, 1), config='max_batch_size: 8\ninput [ { name: "x" dims: [ 5 ] } ]')
    m.write_model(repo, "wrong_name", m.affine(2, 1), config='input [ { name: "nope" dims: [ 4 ] } ]')
    m.write_model(repo, "wrong_type", m.affine(2, 1), config='input [ { name: "x" data_type: TYPE_INT32 } ]')
    m.write_model(repo, "tf", m.affine(2, 1), config='platform: "tensorflow_savedmodel"')
    m.write_model(repo, "fixed_batch", m.fixed_image(), config="max_batch_size: 4")
    m.write_model(repo, "unparsable", m.affine(2, 1), config="max_batch_size: {")
    import_repository(repo)
    model = RegisteredModel.objects.get(name="batched")
    assert (model.max_batch_size, model.version_policy) == (8, "all")
    assert model.instance_group == [{"name": "", "kind": "KIND_CPU", "count": 2, "gpus": []}]
    assert model.config["max_batch_size"] == 8 and model.config["input"][0]["dims"] == [4]
    reasons = {v.model.name: (v.state, v.reason) for v in ModelVersion.objects.select_related("model")}
    assert reasons["batched"] == ("READY", "")
    assert reasons["wrong_dims"][0] == "FAILED" and "[-1, 5]" in reasons["wrong_dims"][1]
    assert "declares input 'nope'" in reasons["wrong_name"][1]
    assert "as INT32, the model has FP32" in reasons["wrong_type"][1]
    assert "tensorflow_savedmodel" in reasons["tf"][1]
    assert "batch" in reasons["fixed_batch"][1]
    assert reasons["unparsable"][0] == "FAILED" and "config.pbtxt" in reasons["unparsable"][1]


def test_an_unsupported_field_is_refused_by_name_never_dropped(repo, capsys):
    """A config.pbtxt field this server does not support fails the import of
    the model, naming the field: its versions are FAILED with that reason,
    and a model imported before keeps its config (the import reports it
    even when every version is unchanged)."""
    m.write_model(
        repo, "accelerated", m.affine(2, 1), config="max_batch_size: 8\nmodel_transaction_policy { decoupled: true }"
    )
    m.write_model(repo, "later", m.affine(2, 1), config="max_batch_size: 8")
    results = _by_key(import_repository(repo))
    message = (
        "config.pbtxt: not supported by this server: 'model_transaction_policy.decoupled': "
        "decoupled models are not supported: one response per request"
    )
    assert (results[("accelerated", "")].outcome, results[("accelerated", "")].message) == ("failed", message)
    assert results[("accelerated", "1")].outcome == "failed"
    assert ModelVersion.objects.get(model__name="accelerated").reason == message
    assert results[("later", "1")].outcome == "created"
    (repo / "later" / "config.pbtxt").write_text("max_batch_size: 4\noptimization { priority: PRIORITY_MAX }")
    call_command("import_repository", str(repo))
    output = capsys.readouterr().out
    assert "failed    later: config.pbtxt: not supported by this server: 'optimization'" in output, output
    assert output.splitlines()[-1] == "2 version directories, 0 failed; 2 model config(s) refused"  # both models
    assert RegisteredModel.objects.get(name="later").max_batch_size == 8  # unchanged
    assert ModelVersion.objects.get(model__name="later").state == "READY"


def test_label_files_are_read_and_checked(repo):
    config = 'max_batch_size: 8\noutput [ { name: "y" label_filename: "%s" } ]'
    m.write_model(repo, "labelled", m.affine(2, 1), config=config % "labels.txt")
    (repo / "labelled" / "labels.txt").write_text("zero\none\ntwo\nthree\n")
    m.write_model(repo, "unlabelled", m.affine(2, 1), config=config % "missing.txt")
    m.write_model(repo, "escaping", m.affine(2, 1), config=config % "../labelled/labels.txt")
    results = _by_key(import_repository(repo))
    assert RegisteredModel.objects.get(name="labelled").output_labels == {"y": ["zero", "one", "two", "three"]}
    assert results[("labelled", "1")].outcome == "created"
    assert "output 'y' label_filename 'missing.txt' is not a file in the model's directory" in (
        results[("unlabelled", "")].message
    )
    assert "must name a file inside the model's directory" in results[("escaping", "")].message
    (repo / "labelled" / "labels.txt").write_text("a\nb\nc\nd\n")  # a changed label file is applied again
    import_repository(repo)
    assert RegisteredModel.objects.get(name="labelled").output_labels == {"y": ["a", "b", "c", "d"]}


def _model_with_external_data(directory: Path, location: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.onnx"
    path.write_bytes(m.external_data_model(location))
    return path


@pytest.mark.parametrize("location", ["../../etc/passwd", "/etc/passwd", "link.bin", "nul\x00.bin"])
def test_external_data_outside_the_model_directory_is_refused(tmp_path, location):
    version_dir = tmp_path / "repo" / "sneaky" / "1"
    _model_with_external_data(version_dir, location)
    if location == "link.bin":
        os.symlink("/etc/passwd", version_dir / "link.bin")
    (result,) = import_repository(tmp_path / "repo")
    assert result.outcome == "failed"
    version = ModelVersion.objects.get(model__name="sneaky")
    assert version.state == "FAILED"
    assert "external data" in version.reason
    stored_dir = artifact_path(version.artifact).parent
    assert sorted(p.name for p in stored_dir.iterdir()) == ["model.onnx"]  # nothing else copied


def test_external_data_inside_the_directory_is_copied(tmp_path):
    version_dir = tmp_path / "repo" / "ext" / "1"
    (version_dir / "data").mkdir(parents=True)
    (version_dir / "data" / "w.bin").write_bytes(np.full(4, 2.0, dtype=np.float32).tobytes())
    _model_with_external_data(version_dir, "data/w.bin")
    (result,) = import_repository(tmp_path / "repo")
    assert result.outcome == "created", result.message
    version = ModelVersion.objects.get(model__name="ext")
    stored = artifact_path(version.artifact)
    assert (stored.parent / "data" / "w.bin").read_bytes() == (version_dir / "data" / "w.bin").read_bytes()
    expected = hashlib.sha256((version_dir / "model.onnx").read_bytes() + (version_dir / "data" / "w.bin").read_bytes())
    assert version.sha256 == expected.hexdigest()


def test_skips_and_command_output(repo, capsys):
    (repo / "empty_model").mkdir()
    (repo / "bad name!").mkdir()
    (repo / "nofile" / "1").mkdir(parents=True)
    (repo / "nofile" / "notes").mkdir()
    m.write_model(repo, "ok", m.identity("BOOL"))
    call_command("import_repository", str(repo))
    out = capsys.readouterr().out
    assert "created   ok/1 -> version 1" in out
    assert "skipped   bad name!: not a valid model name" in out
    assert "skipped   empty_model: no numbered version directories" in out
    assert "skipped   nofile/1: no model.onnx in the directory" in out
    assert out.splitlines()[-1] == "2 version directories, 0 failed"
    assert ModelVersion.objects.count() == 1


def test_missing_repository_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        import_repository(tmp_path / "nowhere")


def test_sources_recorded_as_server_paths_are_rewritten_relative(repo):
    """Migration 0016: versions imported before kept their directory's server path as their source."""
    import importlib

    from django.apps import apps

    m.write_model(repo, "simple", m.add_sub("INT32"))
    import_repository(repo)
    old = str((repo / "simple" / "1").resolve())
    ModelVersion.objects.filter(model__name="simple").update(source=old)
    event = AuditEvent.objects.get(model_name="simple", action="version.import")
    AuditEvent.objects.filter(pk=event.pk).update(detail={**event.detail, "source": old})
    importlib.import_module("models_store.migrations.0016_relative_import_sources").forwards(apps, None)
    assert ModelVersion.objects.get(model__name="simple").source == "import: simple/1"
    event.refresh_from_db()
    assert event.detail["source"] == "import: simple/1" and event.detail["sha256"]
    assert not AuditEvent.objects.filter(detail__icontains=str(repo)).exists()
