"""Tags and descriptions of models and versions (API and web UI, audited,
searchable), the version comparison (API and page), the charts' custom
range, and an ensemble's model page (steps, pins, graph; no instance
settings, no "0 bytes")."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import numpy as np
import pytest
from django.test import Client

from inference.models import MinuteRollupRow
from inference.observability.rollups import bucket
from models_store.accounts import services as accounts
from models_store.intake.repository import import_repository
from models_store.models import AuditEvent, ModelVersion, RegisteredModel
from models_store.registry import charts
from tests.models_store.test_api import Api, _error
from tests.support import onnx_models as m
from tests.support.repository import write_ensembles
from tests.support.store import PASSWORD, person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def alice_api():
    return Api(accounts.token_create(user=person("alice", "ml"), name="script")[1])


def _pairs(tags: dict) -> list[dict]:
    """Tags as the API takes them (MLflow's shape): a list of {"key", "value"}."""
    return [{"key": key, "value": value} for key, value in tags.items()]


def _names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [model["name"] for model in response.json()["results"]]


def test_tags_and_descriptions_are_set_audited_and_searched(alice_api):
    for name, scale in (("fraud", 1.0), ("churn", 2.0), ("plain", 3.0)):
        assert alice_api.upload(name, m.affine(scale, 0.0), team="ml").status_code == 201
    assert alice_api.upload("fraud", m.affine(1.5, 0.0)).status_code == 201  # version 2
    changed = alice_api.json("patch", "/api/models/fraud/", {"tags": _pairs({"owner": "risk", "stage": "prod"})})
    assert changed.status_code == 200 and changed.json()["tags"] == {"owner": "risk", "stage": "prod"}
    alice_api.json(
        "patch",
        "/api/models/churn/",
        {"description": "Predicts Customer CHURN", "tags": [{"key": "owner", "value": "growth"}]},
    )
    version = alice_api.json(
        "patch",
        "/api/models/plain/versions/1/",
        {"description": "trained on the 2024 snapshot", "tags": [{"key": "dataset", "value": "2024"}]},
    )
    assert version.status_code == 200
    assert (version.json()["description"], version.json()["tags"]) == (
        "trained on the 2024 snapshot",
        {"dataset": "2024"},
    )
    assert alice_api.get("/api/models/plain/versions/1/").json()["tags"] == {"dataset": "2024"}
    twice = [
        {"key": "run", "value": "1"},
        {"key": "run", "value": "2"},
        {"key": "flag"},
    ]  # a key twice: the last counts
    assert alice_api.json("patch", "/api/models/plain/versions/2/", {"tags": twice}).status_code == 404  # no version 2
    assert alice_api.json("patch", "/api/models/churn/versions/1/", {"tags": twice}).json()["tags"] == {
        "flag": "",
        "run": "2",
    }
    # audited with the actor and what changed
    tags_event = AuditEvent.objects.get(action="model.tags", model_name="fraud")
    assert tags_event.actor_name == "alice" and tags_event.detail == {
        "before": {},
        "tags": {"owner": "risk", "stage": "prod"},
    }
    version_event = AuditEvent.objects.get(action="version.update", model_name="plain")
    assert version_event.version_number == 1 and version_event.detail["tags"] == {"dataset": "2024"}
    # the list's filters: a tag key, key=value, several (all), q in names and descriptions (any case)
    assert _names(alice_api.get("/api/models/?tag=owner")) == ["churn", "fraud"]
    assert _names(alice_api.get("/api/models/?tag=owner=risk")) == ["fraud"]
    assert _names(alice_api.get("/api/models/?tag=owner&tag=stage=prod")) == ["fraud"]
    assert _names(alice_api.get("/api/models/?tag=owner=nobody")) == []
    assert _names(alice_api.get("/api/models/?tag=dataset=2024")) == ["plain"]  # a version's tag finds its model
    assert _names(alice_api.get("/api/models/?q=churn")) == ["churn"]
    assert _names(alice_api.get("/api/models/?q=customer")) == ["churn"]
    assert _names(alice_api.get("/api/models/?q=SNAPSHOT")) == ["plain"]  # a version's description
    assert _names(alice_api.get("/api/models/?q=zzz")) == []
    assert _names(alice_api.get("/api/models/?q=%00")) == ["churn", "fraud", "plain"]  # NUL alone: no filter


@pytest.mark.parametrize(
    "tags, message",
    [
        ([{"key": "bad key", "value": "x"}], "a tag key is 1 to 64"),
        ([{"key": "-x", "value": "x"}], "a tag key is 1 to 64"),
        ([{"key": "k", "value": "two\nlines"}], "one line of text"),
        ([{"key": f"k{i}"} for i in range(51)], "at most 50 tags (got 51)"),
        ([{"key": "k", "value": "v" * 257}], "no more than 256"),
        ([{"key": "k", "value": 5}], "Not a valid string"),
        ({"k": "v"}, "Expected a list"),
    ],
)
def test_bad_tags_are_400_and_change_nothing(alice_api, tags, message):
    assert alice_api.upload("fraud", m.affine(1.0, 0.0), team="ml").status_code == 201
    for path in ("/api/models/fraud/", "/api/models/fraud/versions/1/"):
        assert message in _error(alice_api.json("patch", path, {"tags": tags}), 400)
    assert RegisteredModel.objects.get().tags == {} and ModelVersion.objects.get().tags == {}
    assert not AuditEvent.objects.filter(action__in=("model.tags", "version.update")).exists()


def _rollup(name: str, version: int, minute: int, successes: int, errors: int, compute_ns: list[int]) -> None:
    histogram: dict[str, int] = {}
    for ns in compute_ns:
        histogram[str(bucket(ns))] = histogram.get(str(bucket(ns)), 0) + 1
    MinuteRollupRow.objects.create(
        minute=minute, model_name=name, version=version, transport="rest", writer="test", successes=successes,
        errors=errors, inferences=successes, executions=successes, compute_histogram=histogram,
    )  # fmt: skip


def test_compare_two_versions_through_the_api(alice_api):
    assert alice_api.upload("affine", m.affine(1.0, 0.0), team="ml").status_code == 201
    assert alice_api.upload("affine", m.affine(2.0, 0.0, width=6)).status_code == 201  # held: breaks callers of 1
    alice_api.json(
        "patch", "/api/models/affine/versions/2/", {"tags": [{"key": "run", "value": "b"}], "description": "wider"}
    )
    now = int(time.time()) // 60
    rng = np.random.default_rng(7)
    latencies = {1: rng.integers(1_000_000, 2_000_000, 40), 2: rng.integers(5_000_000, 9_000_000, 40)}
    for number, (successes, errors) in {1: (30, 2), 2: (12, 5)}.items():
        _rollup("affine", number, now - 1, successes, errors, [int(x) for x in latencies[number]])
    response = alice_api.get("/api/models/affine/versions/compare?a=1&b=2")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["a"]["number"], body["b"]["number"]) == (1, 2)
    assert (body["a"]["serving"], body["b"]["serving"], body["b"]["held"]) == (True, False, True)
    assert body["signature"] == [
        {"kind": "input", "name": "x", "a": {"datatype": "FP32", "shape": [-1, 4]},
         "b": {"datatype": "FP32", "shape": [-1, 6]}, "same": False},
        {"kind": "output", "name": "y", "a": {"datatype": "FP32", "shape": [-1, 4]},
         "b": {"datatype": "FP32", "shape": [-1, 6]}, "same": False},
    ]  # fmt: skip
    assert body["breaking"] == [
        "input 'x' dimension 1 is 6, not 4 ([-1, 4] -> [-1, 6])",
        "output 'y' dimension 1 is 6, not 4 ([-1, 4] -> [-1, 6])",
    ]
    assert body["breaking_back"] == [
        "input 'x' dimension 1 is 4, not 6 ([-1, 6] -> [-1, 4])",
        "output 'y' dimension 1 is 4, not 6 ([-1, 6] -> [-1, 4])",
    ]
    fields = {row["field"]: row for row in body["fields"]}
    versions = {v.number: v for v in ModelVersion.objects.all()}
    assert fields["sha256"] == {"field": "sha256", "a": versions[1].sha256, "b": versions[2].sha256, "same": False}
    sizes = (versions[1].size, versions[2].size)
    assert fields["size"] == {"field": "size", "a": sizes[0], "b": sizes[1], "same": sizes[0] == sizes[1]}
    assert fields["tags"] == {"field": "tags", "a": {}, "b": {"run": "b"}, "same": False}
    assert fields["platform"]["same"] and fields["platform"]["a"] == "onnxruntime_onnx"
    assert body["validation"] == {"a": versions[1].log, "b": versions[2].log} and body["validation"]["a"]
    traffic = body["traffic"]
    assert (traffic["a"]["total_requests"], traffic["a"]["total_errors"]) == (32, 2)
    assert (traffic["b"]["total_requests"], traffic["b"]["total_errors"]) == (17, 5)
    step = traffic["times"].index((now - 1) * 60)
    for number, side in ((1, "a"), (2, "b")):
        exact = float(np.percentile(latencies[number], 99)) / 1e6
        assert abs(traffic[side]["compute_p99_ms"][step] - exact) <= exact / 8
    # bad and missing versions
    assert "no version 9" in _error(alice_api.get("/api/models/affine/versions/compare?a=1&b=9"), 404)
    assert "a" in _error(alice_api.get("/api/models/affine/versions/compare?a=x&b=1"), 400)
    assert "b" in _error(alice_api.get("/api/models/affine/versions/compare?a=1"), 400)
    assert "range" in _error(alice_api.get("/api/models/affine/versions/compare?a=1&b=2&range=year"), 400)


def test_custom_chart_range_picks_its_step_and_sums_its_window():
    start = 1_800_000_000 // 3600 * 3600
    counts = np.random.default_rng(3).integers(0, 50, 48 * 60)  # two days of minutes
    for i, n in enumerate(counts):
        if n:
            _rollup("m", 1, start // 60 + i, int(n), 0, [])
    data = charts.model_charts("m", params={"from": str(start + 3600), "to": str(start + 3 * 3600)})
    assert (data["range"], data["step_seconds"], data["start"], data["end"]) == (
        "custom",
        60,
        start + 3600,
        start + 3 * 3600,
    )
    assert data["series"][-1]["requests"] == [int(n) for n in counts[60:180]]
    iso = charts.model_charts("m", params={"from": "2027-01-15T08:00:00Z", "to": "2027-01-16T20:00:00+00:00"})
    moment = datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()  # 36 hours: 144 steps of 15 minutes
    assert (iso["step_seconds"], iso["start"], len(iso["times"])) == (900, moment, 144)
    # minutes older than 26 hours may be folded into hour rows (rollups_db.compact): steps of an hour at least
    old = charts.model_charts("m", params={"from": str(start), "to": str(start + 6 * 3600)}, now_s=start + 30 * 3600)
    assert old["step_seconds"] == 3600 and old["series"][-1]["requests"] == [
        int(s) for s in counts[:360].reshape(6, 60).sum(axis=1)
    ]
    whole = charts.model_charts("m", params={"from": str(start), "to": str(start + 48 * 3600)})
    assert whole["step_seconds"] == 900 and len(whole["times"]) == 192
    assert whole["series"][-1]["requests"] == [int(s) for s in counts.reshape(192, 15).sum(axis=1)]
    for params, message in (
        ({"from": str(start)}, "both from and to"),
        ({"from": str(start), "to": str(start)}, "after from"),
        ({"from": "yesterday", "to": str(start)}, "from is seconds since the epoch"),
        ({"from": "0", "to": str(500 * 86400)}, "at most 400 days"),
        ({"range": "year"}, "unknown range"),
    ):
        with pytest.raises(ValueError, match=message):
            charts.model_charts("m", params=params)


@pytest.fixture
def alice(alice_api):
    client = Client()
    assert client.login(username="alice", password=PASSWORD)
    return client


def test_the_web_ui_edits_searches_and_compares(alice, alice_api):
    assert alice_api.upload("fraud", m.affine(1.0, 0.0), team="ml").status_code == 201
    assert alice_api.upload("fraud", m.affine(2.0, 0.0)).status_code == 201  # version 2, the default
    assert alice_api.upload("other", m.affine(3.0, 0.0), team="ml").status_code == 201
    page = alice.post("/models/fraud/settings", {
        "description": "card fraud", "tags": "owner=risk\nstage = prod\n\npii", "version_policy": "latest",
        "latest_versions": "1", "payload_log_rate": "0", "payload_log_max_bytes": "65536",
    })  # fmt: skip
    assert page.status_code == 302
    assert RegisteredModel.objects.get(name="fraud").tags == {"owner": "risk", "pii": "", "stage": "prod"}
    refused = alice.post("/models/fraud/versions/2/notes", {"description": "x", "tags": "a=1\na=2"})
    assert refused.status_code == 400 and "tag &#x27;a&#x27; is given twice" in refused.content.decode()
    assert (
        alice.post("/models/fraud/versions/2/notes", {"description": "retrained", "tags": "run=7"}).status_code == 302
    )
    version = ModelVersion.objects.get(model__name="fraud", number=2)
    assert (version.description, version.tags) == ("retrained", {"run": "7"})
    listed = alice.get("/models/?tag=run=7").content.decode()
    assert 'data-model="fraud"' in listed and 'data-model="other"' not in listed
    assert 'data-model="fraud"' not in alice.get("/models/?q=nothing-like-it").content.decode()
    # the default version's page still shows how it differs (from version 1), and links the comparison
    default_page = alice.get("/models/fraud/versions/2/").content.decode()
    assert "This version is the default" in default_page and "Compared with version 1" in default_page
    assert "/models/fraud/compare/?a=1&amp;b=2" in default_page
    compare = alice.get("/models/fraud/compare/?a=1&b=2")
    text = compare.content.decode()
    assert compare.status_code == 200 and 'data-field="sha256" data-same="false"' in text
    assert 'data-tensor="input:x" data-same="true"' in text
    assert alice.get("/models/fraud/compare/?a=1&b=5").status_code == 404
    assert alice.get("/models/fraud/compare/?a=one&b=2").status_code == 400
    assert alice.get("/models/fraud/compare.json?a=1&b=2&from=10&to=5").json() == {"error": "to must be after from"}
    assert alice.get("/models/fraud/charts.json?from=1800000000&to=1800003600").json()["step_seconds"] == 60


def test_an_ensembles_page_shows_its_steps_and_no_instance_settings(tmp_path, alice_api):
    write_ensembles(tmp_path / "repo")
    import_repository(tmp_path / "repo")
    person("ops", superuser=True)
    ops = Client()
    assert ops.login(username="ops", password=PASSWORD)
    page = ops.get("/models/ens_pipeline/").content.decode()
    steps = re.findall(r'<g class="node step" data-node="step:(\d)">', page)
    assert steps == ["0", "1", "2"]
    assert re.findall(r'<g class="node (input|output)" data-node="(?:in|out):(\w+)"', page) == [
        ("input", "RAW"),
        ("output", "PROBABILITIES"),
        ("output", "LABEL"),
    ]
    assert page.count('<g class="edge">') == 5  # RAW, features, logits, PROBABILITIES, LABEL
    table = page.split('id="ensemble-steps"')[1].split("</table>")[0]
    assert re.findall(r'href="/models/(\w+)/versions/(\d+)/"', table) == [
        ("ens_preprocess", "1"),
        ("ens_classifier", "1"),
        ("ens_postprocess", "1"),
    ]
    assert "0 bytes" not in page and "config only" in page
    assert "an ensemble has none of its own" in page.split('id="instance-group"')[1].split("</dd>")[0]
    assert 'name="instance_kind"' not in page and 'name="tags"' in page
    version_page = ops.get("/models/ens_pipeline/versions/1/").content.decode()
    assert "0 bytes" not in version_page and "no model file" in version_page
    listing = ops.get("/models/?q=ens_pipeline").content.decode()
    assert "0 bytes" not in listing
    # the API refuses an instance group for an ensemble (Triton: its steps have their own)
    ops_api = Api(accounts.token_create(user=person("ops2", superuser=True), name="script")[1])
    change = {"instance_group": [{"kind": "KIND_CPU", "count": 2}]}
    assert "is an ensemble" in _error(ops_api.json("patch", "/api/models/ens_pipeline/", change), 400)
    assert RegisteredModel.objects.get(name="ens_pipeline").instance_group == []
