"""The management API with authenticated clients: uploads and their edge
cases, models and versions, labels, version policy, retire, delete, audit,
the OpenAPI schema and docs."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.test import Client

from models_store import storage
from models_store.accounts import services as accounts
from models_store.models import AuditEvent, ModelVersion, RegisteredModel, VersionLabel
from models_store.registry.services import models as model_services
from tests.support import onnx_models as m
from tests.support.onnx_models import external_data_model, failing_model
from tests.support.store import PASSWORD, person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


def _file(payload: bytes, name: str = "model.onnx") -> io.BytesIO:
    handle = io.BytesIO(payload)
    handle.name = name
    return handle


class Api:
    """A client sending ``Authorization: Bearer <token>``."""

    def __init__(self, token: str):
        self.client = Client()
        self.auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def get(self, path):
        return self.client.get(path, **self.auth)

    def upload(self, model, payload, **fields):
        return self.client.post(f"/api/models/{model}/versions/", {"file": _file(payload), **fields}, **self.auth)

    def json(self, method, path, body=None):
        call = getattr(self.client, method)
        return call(path, body, content_type="application/json", **self.auth)


@pytest.fixture
def alice_api():
    user = person("alice", "ml")
    return Api(accounts.token_create(user=user, name="script")[1])


@pytest.fixture
def bob_api():
    user = person("bob", "vision")
    return Api(accounts.token_create(user=user, name="script")[1])


def _staging_entries():
    staging = storage.store_root() / storage.STAGING_DIRNAME
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


def _error(response, status: int) -> str:
    """The error sentence of a 4xx answered in the one error shape."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    assert set(body) <= ({"error", "version"} if status == 422 else {"error", "fields", "differences"}), body
    return body["error"]


def _fields(response, status: int) -> dict:
    """The ``fields`` of a validation error (its sentence names each of them)."""
    error = _error(response, status)
    fields = response.json()["fields"]
    assert fields and all(name in error for name in fields), (error, fields)
    return fields


def test_authentication_is_required():
    anonymous = Client()
    response = anonymous.get("/api/models/")
    assert _error(response, 401) == "Authentication credentials were not provided."
    assert response["WWW-Authenticate"] == 'Bearer realm="modelhost"'
    assert _error(Api("mh_wrong").get("/api/models/"), 401) == "invalid or revoked API token"
    assert "malformed" in _error(anonymous.get("/api/models/", HTTP_AUTHORIZATION="Bearer a b"), 401)


def test_upload_creates_a_ready_version(alice_api):
    payload = m.affine(2.0, 1.0)
    response = alice_api.upload("affine", payload, team="ml", description="y = 2x + 1")
    assert response.status_code == 201, response.content
    assert response["Location"] == "/api/models/affine/versions/1/"
    body = response.json()
    assert {k: body[k] for k in ("model", "number", "state", "reason", "serving", "labels", "size", "uploaded_by")} == {
        "model": "affine",
        "number": 1,
        "state": "READY",
        "reason": "",
        "serving": True,
        "labels": [],
        "size": len(payload),
        "uploaded_by": "alice",
    }
    assert body["sha256"] == hashlib.sha256(payload).hexdigest()
    assert body["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert body["log"][0].startswith("validated on ") and body["log"][1] == "ONNX checker passed"
    detail = alice_api.get("/api/models/affine/").json()
    assert (detail["team"], detail["description"], detail["served_versions"]) == ("ml", "y = 2x + 1", [1])
    listing = alice_api.get("/api/models/").json()["results"]
    assert [(m_["name"], [v["number"] for v in m_["versions"]]) for m_ in listing] == [("affine", [1])]
    assert _staging_entries() == []


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        (b"", 400, "the file is empty"),
        (b"GIF89a not a model", 400, "not an ONNX model"),
        (external_data_model("../../etc/passwd"), 400, "'../../etc/passwd', outside the model's directory"),
        (
            external_data_model("w\x00.bin"),
            400,
            "tensor 'w' references external data at 'w\\x00.bin': a location may not hold control characters",
        ),
        (external_data_model("data/\x1b[2J.bin"), 400, "a location may not hold control characters"),
    ],
    ids=["empty", "not-onnx", "etc-passwd", "nul", "escape"],
)
def test_bad_uploads_are_4xx_and_store_nothing(alice_api, payload, status, message):
    assert message in _error(alice_api.upload("m", payload, team="ml"), status)
    assert not RegisteredModel.objects.exists()
    assert list(storage.store_root().iterdir()) in ([], [storage.store_root() / storage.STAGING_DIRNAME])
    assert _staging_entries() == []


def test_upload_edge_cases(alice_api, settings):
    assert "no model file in the upload" in _error(
        alice_api.client.post("/api/models/m/versions/", {"team": "ml"}, **alice_api.auth), 400
    )
    assert _error(alice_api.upload("m", m.affine(1, 1)), 404) == (
        "unknown model 'm': to create it with this upload, give the team that will own it"
    )
    assert _error(alice_api.upload("m", m.affine(1, 1), team="nope"), 404) == "unknown team 'nope'"
    assert _fields(alice_api.upload("m", m.affine(1, 1), team="ml "), 400) == {
        "team": ["A team name starts with a letter or digit and holds only letters, digits, '_', '.' and '-' "
                 "(at most 64 characters)."]
    }  # fmt: skip
    assert _fields(alice_api.upload("m", m.affine(1, 1), team="ml", description="a\x00b"), 400) == {
        "description": ["Null characters are not allowed."]
    }
    assert "A model name starts with" in _error(alice_api.upload("-bad", m.affine(1, 1), team="ml"), 400)
    settings.MAX_UPLOAD_BYTES = 100
    assert "larger than the upload limit of 100 bytes" in _error(alice_api.upload("m", m.affine(1, 1), team="ml"), 413)
    settings.MAX_UPLOAD_BYTES = 10
    big = b"x" * 200_000  # the declared body is above the limit: not even read
    assert "larger than the upload limit of 10 bytes" in _error(alice_api.upload("m", big, team="ml"), 413)
    assert not RegisteredModel.objects.exists() and _staging_entries() == []


def test_an_upload_with_a_config_applies_it_and_refuses_what_is_unsupported(alice_api):
    """``config`` (a config.pbtxt) replaces the model's configuration and the
    version is validated with it; a field this server does not support is
    refused by name before anything is stored, never dropped."""
    config = (
        'max_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 4 ] } ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 100 }"
    )
    refused = alice_api.upload("conf", m.affine(1, 1), team="ml", config=config.replace("[ 4 ]", "[ 2, 2 ]"))
    assert "model input NHWC/NCHW require 3 dims" in _error(refused, 400)  # Triton's words
    for bad, needle in (
        ("model_transaction_policy { decoupled: true }", "not supported by this server: 'model_transaction_policy.decoupled'"),
        ('optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" } ] } }',
         "not supported by this server: 'optimization'"),
        ("max_batch_size: {", "config.pbtxt: 1:17"),
        ('output [ { name: "y" label_filename: "labels.txt" } ]', "label_filename needs its label file"),
        ('name: "other"', "the config names the model 'other', not 'conf'"),
    ):  # fmt: skip
        assert needle in _error(alice_api.upload("conf", m.affine(1, 1), team="ml", config=bad), 400), bad
    assert not RegisteredModel.objects.exists() and _staging_entries() == []

    response = alice_api.upload("conf", m.affine(1, 1), team="ml", config=config.replace("NHWC", "NONE"))
    assert response.status_code == 201, response.content
    model = RegisteredModel.objects.get(name="conf")
    assert model.max_batch_size == 8 and model.config["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert AuditEvent.objects.filter(model_name="conf", action="model.config").get().detail["source"] == "upload"
    wrong = alice_api.upload("conf", m.affine(2, 1), config='input [ { name: "x" dims: [ 5 ] } ]')
    assert "input 'x' of version 1 has dims [-1, 4], not [5]" in _error(wrong, 400)
    assert ModelVersion.objects.filter(model__name="conf").count() == 1  # the refused upload left nothing


def test_duplicate_upload_is_409(alice_api):
    payload = m.affine(1, 1)
    assert alice_api.upload("m", payload, team="ml").status_code == 201
    error = _error(alice_api.upload("m", payload), 409)
    assert error.startswith("model 'm' already has these bytes") and error.endswith("as version 1 (READY)")
    assert ModelVersion.objects.count() == 1 and _staging_entries() == []


def test_upload_that_fails_validation_is_422_with_the_failed_version(alice_api):
    alice_api.upload("m", m.affine(1, 1), team="ml")
    response = alice_api.upload("m", failing_model())
    error = _error(response, 422)
    assert error.startswith("version 2 of 'm' failed validation: ONNX checker:")
    assert response.json()["version"]["state"] == "FAILED"
    version = alice_api.get("/api/models/m/versions/2/").json()
    assert version["state"] == "FAILED" and version["reason"] in error and not version["serving"]


def test_a_failed_versions_reason_shows_the_model_directory_not_the_servers_path(alice_api):
    """ONNX Runtime names the file it could not load: the reason (and the
    log) say ``<model dir>/model.onnx``, never the store's absolute path (in
    worker mode: the worker's cache)."""
    response = alice_api.upload("m", m.unknown_domain_operator(), team="ml")
    error = _error(response, 422)
    version = ModelVersion.objects.get(model__name="m", number=1)
    assert "ONNX Runtime could not create a session" in version.reason
    assert "Load model from <model dir>/model.onnx failed" in version.reason and version.reason in error
    root = str(storage.store_root().resolve())
    assert root not in error and not any(root in line for line in version.log), version.log
    assert version.log[-1] == f"failed: {version.reason}"


def test_teams_guard_changes(alice_api, bob_api):
    alice_api.upload("iris", m.affine(1, 1), team="ml")
    assert "belongs to team ml" in _error(bob_api.upload("iris", m.affine(2, 2)), 403)
    assert "not a member of team ml" in _error(bob_api.upload("other", m.affine(2, 2), team="ml"), 403)
    assert "belongs to team ml" in _error(bob_api.json("patch", "/api/models/iris/", {"description": "x"}), 403)
    assert "belongs to team ml" in _error(bob_api.json("put", "/api/models/iris/labels/s/", {"version": 1}), 403)
    assert "belongs to team ml" in _error(bob_api.json("delete", "/api/models/iris/versions/1/"), 403)
    assert bob_api.get("/api/models/iris/").status_code == 200  # everyone signed in may read
    assert ModelVersion.objects.count() == 1 and _staging_entries() == []


def test_with_tokens_required_a_team_sees_only_its_own_models(alice_api, bob_api, settings):
    """F14: with INFERENCE_REQUIRE_TOKEN, another team's model (and an
    operator-owned one) is missing from the list and answers 404 on every
    route, as a model that does not exist; the name is only said to be
    taken when uploading to it. Operators see every model."""
    alice_api.upload("iris", m.affine(1, 1), team="ml")
    model_services.model_upsert(name="legacy")
    root = Api(accounts.token_create(user=person("root", superuser=True), name="ops")[1])
    assert {m["name"] for m in bob_api.get("/api/models/").json()["results"]} == {
        "iris",
        "legacy",
    }  # off: everyone sees all
    settings.INFERENCE_REQUIRE_TOKEN = True
    assert [m["name"] for m in alice_api.get("/api/models/").json()["results"]] == ["iris"]
    assert bob_api.get("/api/models/").json()["results"] == []
    assert [m["name"] for m in root.get("/api/models/").json()["results"]] == ["iris", "legacy"]
    for path in ("", "versions/", "versions/1/", "audit/"):
        assert _error(bob_api.get(f"/api/models/iris/{path}"), 404) == "unknown model 'iris'", path
        assert _error(bob_api.get(f"/api/models/nope/{path}"), 404) == "unknown model 'nope'", path
        assert alice_api.get(f"/api/models/iris/{path}").status_code == 200, path
        assert root.get(f"/api/models/iris/{path}").status_code == 200, path
    assert _error(alice_api.get("/api/models/legacy/audit/"), 404) == "unknown model 'legacy'"
    for method, path, body in (
        ("patch", "/api/models/iris/", {"description": "x"}),
        ("put", "/api/models/iris/labels/s/", {"version": 1}),
        ("delete", "/api/models/iris/labels/s/", None),
        ("delete", "/api/models/iris/versions/1/", None),
        ("post", "/api/models/iris/versions/1/retire", None),
        ("put", "/api/models/iris/traffic/", {"weights": {}}),
        ("post", "/api/models/iris/traffic/rollback", None),
    ):
        assert _error(bob_api.json(method, path, body), 404) == "unknown model 'iris'", (method, path)
    refused = bob_api.upload("iris", m.affine(2, 2), team="vision")
    assert _error(refused, 409) == "the model name 'iris' is taken (by a model of another team); choose another name"
    assert ModelVersion.objects.count() == 1 and _staging_entries() == []
    assert {e["action"] for e in alice_api.get("/api/models/iris/audit/").json()["results"]} >= {
        "model.create",
        "version.upload",
    }


def test_a_models_audit_log_is_its_own_not_that_of_an_earlier_model_of_that_name(alice_api, bob_api):
    alice_api.upload("shared-name", m.affine(1, 1), team="ml")
    alice_api.json("delete", "/api/models/shared-name/versions/1/")
    model_services.model_delete(model=RegisteredModel.objects.get(name="shared-name"))
    assert bob_api.upload("shared-name", m.affine(2, 2), team="vision").status_code == 201
    events = bob_api.get("/api/models/shared-name/audit/").json()["results"]
    assert "alice" not in {e["actor_name"] for e in events} and "version.delete" not in [e["action"] for e in events]
    assert [e["action"] for e in events][-1] == "model.create" and events[-1]["actor_name"] == "bob"
    assert AuditEvent.objects.filter(model_name="shared-name", actor_name="alice").count() >= 2  # kept, in the admin


def test_policy_labels_retire_delete_and_audit(alice_api):
    for payload in (m.affine(1, 1), failing_model(), m.affine(3, 1)):
        alice_api.upload("p", payload, team="ml")
    patch = alice_api.json("patch", "/api/models/p/", {"version_policy": "all", "description": "three"})
    assert patch.status_code == 200 and patch.json()["served_versions"] == [3, 1]
    error = _error(
        alice_api.json("patch", "/api/models/p/", {"version_policy": "specific", "specific_versions": [2]}), 409
    )
    assert "would serve no version" in error
    assert "has no version 7" in _error(
        alice_api.json("patch", "/api/models/p/", {"version_policy": "specific", "specific_versions": [1, 7]}), 409
    )
    fields = alice_api.json("patch", "/api/models/p/", {"latest_versions": 0, "version_policy": "sometimes"})
    assert fields.status_code == 400 and fields.json() == {
        "error": "invalid fields: version_policy, latest_versions",
        "fields": {
            "latest_versions": ["Ensure this value is greater than or equal to 1."],
            "version_policy": ['"sometimes" is not a valid choice.'],
        },
    }

    label = alice_api.json("put", "/api/models/p/labels/stable/", {"version": 1})
    assert label.status_code == 200 and label.json()["labels"] == {"stable": 1}
    assert "is FAILED" in _error(alice_api.json("put", "/api/models/p/labels/canary/", {"version": 2}), 409)
    assert "has no version 8" in _error(alice_api.json("put", "/api/models/p/labels/canary/", {"version": 8}), 409)
    assert "stable point at version 1" in _error(alice_api.json("post", "/api/models/p/versions/1/retire"), 409)
    assert "only a retired version can be restored" in _error(
        alice_api.json("post", "/api/models/p/versions/1/restore"), 409
    )
    assert alice_api.json("delete", "/api/models/p/labels/stable/").status_code == 204
    assert "no version label 'stable'" in _error(alice_api.json("delete", "/api/models/p/labels/stable/"), 404)

    retired = alice_api.json("post", "/api/models/p/versions/1/retire").json()
    assert (retired["state"], retired["serving"]) == ("UNAVAILABLE", False)
    assert alice_api.json("post", "/api/models/p/versions/1/restore").json()["state"] == "READY"
    assert alice_api.json("delete", "/api/models/p/versions/2/").status_code == 204
    assert "has no version 2" in _error(alice_api.get("/api/models/p/versions/2/"), 404)
    assert "unknown model 'q'" in _error(alice_api.get("/api/models/q/"), 404)

    audit = alice_api.get("/api/models/p/audit/").json()["results"]
    assert [e["action"] for e in audit][:8] == [
        "version.delete", "version.restore", "version.retire", "label.delete", "label.set", "model.update",
        "model.policy", "version.ready",
    ]  # fmt: skip
    assert {e["actor_name"] for e in audit[:7]} == {"alice"}
    assert AuditEvent.objects.filter(model_name="p", action="version.upload").count() == 3


def test_session_clients_need_the_csrf_token():
    person("carol", "ml")
    browser = Client(enforce_csrf_checks=True)
    assert browser.login(username="carol", password=PASSWORD)
    assert browser.get("/api/models/").status_code == 200
    response = browser.post("/api/models/x/versions/", {"file": _file(m.affine(1, 1)), "team": "ml"})
    assert "CSRF" in _error(response, 403)
    assert not RegisteredModel.objects.exists() and _staging_entries() == []


def test_openapi_schema_and_docs_are_served_locally(alice_api):
    schema = alice_api.client.get("/api/schema/?format=json").json()
    paths = set(schema["paths"])
    assert "/api/models/{name}/versions/" in paths and "/api/models/{name}/labels/{label}/" in paths
    assert not any(p.startswith(("/v1", "/v2")) for p in paths)
    assert schema["components"]["securitySchemes"]["apiToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "A personal API token (web UI: API tokens): Authorization: Bearer <token>",
    }
    upload = schema["paths"]["/api/models/{name}/versions/"]["post"]
    assert "multipart/form-data" in upload["requestBody"]["content"]
    docs = alice_api.client.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in docs and "cdn." not in docs
    static = alice_api.client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert static.status_code == 200


def test_the_schema_declares_what_the_api_does(alice_api):
    schema = alice_api.client.get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    assert components["Error"]["required"] == ["error"]
    assert set(components["Error"]["properties"]) == {"error", "fields", "differences"}
    # Every 4xx of every operation is the one error shape (the 422 of an upload adds the version).
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for code, response in operation["responses"].items():
                if code.startswith("4"):
                    expected = "UploadFailed" if code == "422" else "Error"
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref == f"#/components/schemas/{expected}", (method, path, code)
            if "401" in operation["responses"]:
                assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]
    assert all("401" in op["responses"] for ops in schema["paths"].values() for op in ops.values())
    # Nullable where the API answers null.
    assert components["Model"]["properties"]["team"]["nullable"] is True
    assert components["Version"]["properties"]["uploaded_by"]["nullable"] is True
    # The upload says when `team` is needed and what happens without it.
    upload = schema["paths"]["/api/models/{name}/versions/"]["post"]
    assert (
        "Required when the upload creates the model" in components["UploadRequest"]["properties"]["team"]["description"]
    )
    assert "no team was given to create it" in upload["responses"]["404"]["description"]
    # Links from an upload to the version operations, and from setting a label to its delete.
    links = upload["responses"]["201"]["links"]
    assert upload["responses"]["202"]["links"] == links
    for name, operation_id in [
        ("GetVersion", "models_versions_retrieve"),
        ("RetireVersion", "models_versions_retire_create"),
        ("RestoreVersion", "models_versions_restore_create"),
        ("DeleteVersion", "models_versions_destroy"),
    ]:
        assert links[name]["operationId"] == operation_id
        assert links[name]["parameters"] == {"name": "$request.path.name", "number": "$response.body#/number"}
    assert links["SetLabel"]["requestBody"] == {"version": "$response.body#/number"}
    label = schema["paths"]["/api/models/{name}/labels/{label}/"]["put"]
    assert label["responses"]["200"]["links"]["DeleteLabel"] == {
        "operationId": "models_labels_destroy",
        "parameters": {"name": "$request.path.name", "label": "$request.path.label"},
        "description": "Remove the version label.",
    }
    operation_ids = {op["operationId"] for ops in schema["paths"].values() for op in ops.values()}
    linked = {
        link["operationId"]
        for ops in schema["paths"].values()
        for op in ops.values()
        for response in op["responses"].values()
        for link in response.get("links", {}).values()
    }
    assert linked <= operation_ids


def test_an_imported_model_has_no_team(alice_api, tmp_path):
    model_services.model_upsert(name="legacy")
    listing = alice_api.get("/api/models/").json()["results"]
    assert [(model["name"], model["team"]) for model in listing] == [("legacy", None)]
    assert alice_api.get("/api/models/legacy/").json()["team"] is None
    assert "operator-owned" in _error(alice_api.json("patch", "/api/models/legacy/", {"description": "x"}), 403)


def test_errors_have_one_shape(alice_api):
    alice_api.upload("m", m.affine(1, 1), team="ml")
    empty = alice_api.json("patch", "/api/models/m/", {"specific_versions": [], "instance_group": [{"gpus": [-1]}]})
    assert _fields(empty, 400) == {
        "specific_versions": ["This list may not be empty."],
        "instance_group.0.gpus.0": ["Ensure this value is greater than or equal to 0."],
    }
    assert _fields(alice_api.json("put", "/api/models/m/labels/stable/", {}), 400) == {
        "version": ["This field is required."]
    }
    assert _fields(alice_api.json("put", "/api/models/m/labels/stable/", {"version": "1"}), 400) == {
        "version": ["A valid integer is required."]
    }
    assert _fields(alice_api.json("patch", "/api/models/m/", {"description": 7}), 400) == {
        "description": ["Not a valid string."]
    }
    response = alice_api.client.put(
        "/api/models/m/labels/stable/", b"{", content_type="application/json", **alice_api.auth
    )
    assert _error(response, 400).startswith("JSON parse error")
    assert _error(alice_api.json("put", "/api/models/m/labels/stable/", [1]), 400) == (
        "Invalid data. Expected a dictionary, but got list."
    )
    plain = alice_api.client.patch("/api/models/m/", "x", content_type="text/plain", **alice_api.auth)
    assert _error(plain, 415) == 'Unsupported media type "text/plain" in request.'
    assert _error(alice_api.json("post", "/api/models/m/"), 405) == 'Method "POST" not allowed.'
    crowded = {f"field{i}": "x" for i in range(1001)}
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in _error(alice_api.upload("m", m.affine(2, 2), **crowded), 400)
    assert _error(alice_api.get("/api/models/m/versions/1/nope"), 404) == "not found: GET /api/models/m/versions/1/nope"
    # A version number no version can have is a 404, never an error of the database.
    assert (
        _error(alice_api.get("/api/models/m/versions/99999999999999999999/"), 404)
        == "model 'm' has no version 99999999999999999999"
    )
    assert _error(alice_api.json("post", "/api/models/m/versions/99999999999999999999/retire"), 404)
    # A name may not end with a newline (a regular expression's $ would let it).
    assert "A model name starts with" in _error(alice_api.upload("n%0A", m.affine(2, 2), team="ml"), 400)
    assert "A version label holds" in _error(alice_api.json("put", "/api/models/m/labels/s%0A/", {"version": 1}), 400)
    assert RegisteredModel.objects.count() == 1 and not VersionLabel.objects.exists()


def test_a_refused_change_changes_nothing(alice_api):
    alice_api.upload("m", m.affine(1, 1), team="ml")
    change = {"description": "new", "instance_group": [{"kind": "KIND_CPU"}], "version_policy": "specific"}
    assert "has no version 5" in _error(
        alice_api.json("patch", "/api/models/m/", {**change, "specific_versions": [5]}), 409
    )
    model = RegisteredModel.objects.get(name="m")
    assert (model.description, model.instance_group, model.version_policy) == ("", [], "latest")
    assert not AuditEvent.objects.filter(action__in=["model.instance_group", "model.policy", "model.update"]).exists()


def test_instance_group_through_the_api(alice_api):
    alice_api.upload("placed", m.affine(1, 1), team="ml")
    ok = alice_api.json("patch", "/api/models/placed/", {"instance_group": [{"kind": "KIND_GPU", "gpus": [1, 0]}]})
    assert ok.status_code == 200
    assert ok.json()["instance_group"] == [{"name": "", "kind": "KIND_GPU", "count": 1, "gpus": [1, 0]}]
    assert RegisteredModel.objects.get(name="placed").instance_group[0]["gpus"] == [1, 0]
    wrong = alice_api.json("patch", "/api/models/placed/", {"instance_group": [{"kind": "KIND_CPU", "gpus": [0]}]})
    assert _fields(wrong, 400) == {"instance_group.0.gpus": ["gpus are only for KIND_GPU"]}
    assert wrong.json()["error"] == "instance_group.0.gpus: gpus are only for KIND_GPU"
    bad = alice_api.json("patch", "/api/models/placed/", {"instance_group": [{}, {"kind": "KIND_TPU"}]})
    assert _fields(bad, 400) == {"instance_group.1.kind": ['"KIND_TPU" is not a valid choice.']}
    assert AuditEvent.objects.filter(model_name="placed", action="model.instance_group").count() == 1
