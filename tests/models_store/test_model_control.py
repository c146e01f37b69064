"""Triton's model control modes over the registry (models_store/intake/model_control.py):
which models ``none``, ``poll`` and ``explicit`` start with, the poll's
reconciliation of a repository changed on disk, ``--strict-model-config``,
and ``serve``'s refused flags (runs on SQLite and PostgreSQL)."""

from __future__ import annotations

import re
import shutil

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from inference.extensions.repository import CONTROL_REFUSED_TEXT, RepositoryExtension
from inference.protocol.errors import ModelControlDisabled
from models_store.intake import model_control
from models_store.intake.repository import import_repository
from models_store.models import AuditEvent, ModelVersion, RegisteredModel
from models_store.registry.services import versions as version_services
from tests.support import onnx_models as m
from tests.support.repository import write_ensembles

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

PIPELINE = {"ens_pipeline", "ens_preprocess", "ens_classifier", "ens_postprocess"}


def loaded() -> set[str]:
    return set(RegisteredModel.objects.filter(loaded=True).values_list("name", flat=True))


def state(model: str, number: int) -> str:
    return ModelVersion.objects.get(model__name=model, number=number).state


@pytest.fixture
def ensembles(tmp_path):
    root = tmp_path / "repo"
    write_ensembles(root)
    import_repository(root)
    return set(RegisteredModel.objects.values_list("name", flat=True))


def test_explicit_loads_the_named_models_and_what_their_ensembles_run(ensembles):
    assert model_control.load_at_start(mode="explicit", names=["ens_pipeline"]) == sorted(PIPELINE)
    assert loaded() == PIPELINE
    unloads = AuditEvent.objects.filter(action="model.unload", actor_name="system")
    assert set(unloads.values_list("model_name", flat=True)) == ensembles - PIPELINE
    assert model_control.load_at_start(mode="explicit", names=[]) == [] and loaded() == set()
    assert model_control.load_at_start(mode="explicit", names=["*"]) == sorted(ensembles)


def test_none_and_poll_load_every_model_but_the_excluded(ensembles):
    model_control.load_at_start(mode="explicit", names=["ens_double"])
    assert loaded() == {"ens_double"}
    assert set(model_control.load_at_start(mode="none")) == ensembles
    model_control.load_at_start(mode="explicit", names=[])
    assert set(model_control.load_at_start(mode="poll", exclude={"ens_join"})) == ensembles - {"ens_join"}


def test_unknown_load_model_names(ensembles):
    assert model_control.unknown_models(["ens_double", "nope", "*", "also_missing"]) == ["also_missing", "nope"]


def test_poll_follows_versions_and_models_on_disk(tmp_path):
    root = tmp_path / "repo"
    m.write_model(root, "affine", m.affine(2.0, 1.0))
    m.write_model(root, "other", m.identity("FP32"))
    poll = model_control.RepositoryPoll(root)
    assert [(r.model, r.outcome) for r in poll.run()] == [("affine", "created"), ("other", "created")]
    assert poll.run() == []  # nothing changed: nothing imported again

    m.write_model(root, "affine", m.affine(3.0, 0.0), version=2)
    assert [(r.model, r.directory, r.outcome) for r in poll.run()] == [
        ("affine", "1", "unchanged"),
        ("affine", "2", "created"),
    ]
    shutil.rmtree(root / "affine" / "2")
    poll.run()
    assert (state("affine", 1), state("affine", 2)) == ("READY", "UNAVAILABLE")
    m.write_model(root, "affine", m.affine(3.0, 0.0), version=2)  # the same file again
    poll.run()
    assert state("affine", 2) == "READY"

    shutil.rmtree(root / "other")
    assert poll.removed() == {"other"}
    poll.run()
    assert loaded() == {"affine"}
    m.write_model(root, "other", m.identity("FP32"))
    poll.run()
    assert loaded() == {"affine", "other"} and state("other", 1) == "READY"


def test_poll_leaves_what_a_person_retired(tmp_path):
    root = tmp_path / "repo"
    m.write_model(root, "affine", m.affine(2.0, 1.0))
    m.write_model(root, "affine", m.affine(3.0, 0.0), version=2)
    poll = model_control.RepositoryPoll(root)
    poll.run()
    version_services.version_retire(version=ModelVersion.objects.get(model__name="affine", number=1), actor=None)
    (root / "affine" / "2" / "extra.txt").write_text("a change of the directory")
    poll.run()  # imported again: version 1 is on disk, but a person retired it
    assert (state("affine", 1), state("affine", 2)) == ("UNAVAILABLE", "READY")


def test_poll_keeps_the_version_whose_new_file_fails(tmp_path):
    """As Triton keeps a model whose reload failed."""
    root = tmp_path / "repo"
    m.write_model(root, "affine", m.affine(2.0, 1.0))
    poll = model_control.RepositoryPoll(root)
    poll.run()
    m.write_model(root, "affine", b"not an onnx model")
    results = poll.run()
    assert [(r.outcome, r.version) for r in results] == [("failed", 2)]
    assert (state("affine", 1), state("affine", 2)) == ("READY", "FAILED")


def test_strict_model_config_needs_a_config_that_declares_the_tensors(tmp_path):
    root = tmp_path / "repo"
    m.write_model(root, "bare", m.affine(2.0, 1.0))
    m.write_model(root, "half", m.affine(2.0, 1.0), config='input [{ name: "x", data_type: TYPE_FP32, dims: [-1, 4] }]')
    m.write_model(
        root, "whole", m.affine(2.0, 1.0),
        config='input [{ name: "x", data_type: TYPE_FP32, dims: [-1, 4] }]\n'
        'output [{ name: "y", data_type: TYPE_FP32, dims: [-1, 4] }]\n',
    )  # fmt: skip
    results = {r.model: r for r in import_repository(root, strict=True) if r.directory}
    assert results["bare"].outcome == "failed" and results["bare"].message.startswith("config.pbtxt is required")
    assert (
        results["half"].outcome == "failed" and "must declare the model's inputs and outputs" in results["half"].message
    )
    assert results["whole"].outcome == "created"
    assert (state("bare", 1), state("half", 1), state("whole", 1)) == ("FAILED", "FAILED", "READY")


@pytest.mark.parametrize("mode", ["none", "poll"])
@pytest.mark.parametrize("call", ["load", "unload"])
def test_the_repository_extension_refuses_in_none_and_poll(mode, call):
    extension = RepositoryExtension(registry=None, control_mode=mode)  # refused before the registry is read
    with pytest.raises(ModelControlDisabled) as refused:
        getattr(extension, call)("any", token=None)
    assert refused.value.message == CONTROL_REFUSED_TEXT
    assert (refused.value.http_status, refused.value.grpc_status, refused.value.retry_after) == (
        503,
        "UNAVAILABLE",
        None,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model-control-mode", "sometimes"], "invalid model control mode 'sometimes' (none, poll or explicit)"),
        (["--model-control-mode=explicit", "--load-model=*", "--load-model=iris"], "'*' must be the only"),
        (["--model-control-mode", "poll"], "--model-control-mode poll needs --model-repository"),
        (["--model-control-mode=poll", "--model-repository=/tmp", "--repository-poll-secs=0"], "of 1 or more"),
        (["--exit-on-error=maybe"], "invalid boolean 'maybe'"),
        (["--strict-model-config", "yes"], "invalid boolean 'yes'"),
        (["--repository-poll-secs", "-3"], "'-3' is not a whole number of 0 or more"),
        (["--log-verbose", "lots"], "'lots' is not a whole number"),
        (["--log-format", "json"], "invalid log format 'json'"),
    ],
)
def test_refused_flags_name_the_option(args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("serve", *args)


def test_triton_booleans_and_log_options():
    from hosting import triton_flags

    assert [triton_flags.boolean(v) for v in ("true", "ON", "1", "False", "off", "0")] == [True] * 3 + [False] * 3
    options = {"log_verbose": 2, "log_info": False, "log_warning": None, "log_error": True, "log_format": "ISO8601"}
    assert triton_flags.log_settings(options) == {
        "log_verbose_level": 2, "log_info": False, "log_error": True, "log_format": "ISO8601",
    }  # fmt: skip
    assert triton_flags.log_settings(dict.fromkeys(options)) == {}


def test_the_model_control_mode_setting_is_the_flag_s_default(settings):
    settings.MODEL_CONTROL_MODE = "Poll"
    with pytest.raises(CommandError, match="--model-control-mode poll needs --model-repository"):
        call_command("serve")
    settings.MODEL_CONTROL_MODE = "lazy"
    with pytest.raises(CommandError, match="MODEL_CONTROL_MODE: invalid model control mode 'lazy'"):
        call_command("serve")
