"""The web UI through Django's test client: sign in, pages, forms, uploads,
tokens; bad input answers 4xx with a clear message and changes nothing."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from models_store import storage
from models_store.accounts import services as accounts
from models_store.intake.repository import import_repository
from models_store.models import ApiToken, AuditEvent, ModelVersion, RegisteredModel, VersionLabel
from tests.support import onnx_models as m
from tests.support.onnx_models import external_data_model, failing_model
from tests.support.store import PASSWORD, person

pytestmark = [pytest.mark.django_db(transaction=True)]

XHR = {"HTTP_X_REQUESTED_WITH": "XMLHttpRequest"}


def _file(payload: bytes, name: str = "model.onnx") -> io.BytesIO:
    handle = io.BytesIO(payload)
    handle.name = name
    return handle


def _csrf(page) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)


def _text(response) -> str:
    return response.content.decode()


@pytest.fixture
def alice():
    person("alice", "ml")
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="alice", password=PASSWORD)
    return client


def _post(client, url, data, **extra):
    """POST a form the way a browser does: with the CSRF token of the page."""
    token = _csrf(client.get("/tokens/"))
    return client.post(url, {"csrfmiddlewaretoken": token, **data}, **extra)


def _upload(client, name, payload, url="/upload/", **extra):
    return _post(client, url, {"name": name, "team": "ml", "description": "", "file": _file(payload)}, **extra)


def test_pages_need_sign_in():
    anonymous = Client()
    for url in ("/", "/models/", "/upload/", "/tokens/", "/models/x/"):
        response = anonymous.get(url, follow=False)
        assert response.status_code == 302
    assert anonymous.get("/models/")["Location"] == "/accounts/login/?next=/models/"
    login = anonymous.get("/accounts/login/")
    assert login.status_code == 200 and 'name="csrfmiddlewaretoken"' in _text(login)


def test_sign_in_with_csrf():
    person("alice", "ml")
    browser = Client(enforce_csrf_checks=True)
    page = browser.get("/accounts/login/")
    refused = browser.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 403  # no CSRF token
    wrong = browser.post("/accounts/login/", {"username": "alice", "password": "x", "csrfmiddlewaretoken": _csrf(page)})
    assert wrong.status_code == 200 and "did not match" in _text(wrong)
    ok = browser.post(
        "/accounts/login/", {"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": _csrf(page)}
    )
    assert (ok.status_code, ok["Location"]) == (302, "/models/")


def test_upload_then_model_and_version_pages(alice):
    payload = m.affine(2.0, 1.0)
    response = _upload(alice, "affine", payload)
    assert (response.status_code, response["Location"]) == (302, "/models/affine/versions/1/")
    listing = _text(alice.get("/models/"))
    assert 'data-model="affine"' in listing and "v1 READY" in listing and ">ml<" in listing
    model_page = _text(alice.get("/models/affine/"))
    assert 'id="signature"' in model_page and "<code>x</code>" in model_page and "<code>[-1, 4]</code>" in model_page
    assert "version.upload" in model_page and "alice" in model_page  # the audit log
    version = ModelVersion.objects.get()
    page = _text(alice.get("/models/affine/versions/1/"))
    assert version.sha256 in page and 'id="uploaded-by">alice<' in page
    assert "ONNX checker passed" in page and 'id="tryit"' in page
    assert 'data-url="/v2/models/affine/versions/1/infer"' in page
    assert "tritonclient.grpc" in page and ":predict" in page  # the snippets
    assert "&quot;name&quot;: &quot;x&quot;, &quot;shape&quot;: [1, 4], &quot;datatype&quot;: &quot;FP32&quot;" in page


def test_xhr_upload_answers_json(alice):
    response = _upload(alice, "affine", m.affine(1, 1), **XHR)
    assert response.status_code == 201
    assert response.json() == {"redirect": "/models/affine/versions/1/", "model": "affine", "version": 1}
    again = _upload(alice, "affine", m.affine(1, 1), url="/models/affine/upload/", **XHR)
    assert again.status_code == 409 and "already has these bytes" in again.json()["error"]


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        (b"", 400, "The submitted file is empty."),  # Django's FileField says it first
        (b"PK\x03\x04 a zip file", 400, "not an ONNX model"),
        (external_data_model("../../etc/passwd"), 400, "outside the model&#x27;s directory"),
    ],
    ids=["empty", "not-onnx", "etc-passwd"],
)
def test_bad_uploads_show_the_reason_and_store_nothing(alice, payload, status, message):
    response = _upload(alice, "m", payload)
    assert response.status_code == status
    assert message in _text(response) and 'id="page-error"' in _text(response)
    assert not RegisteredModel.objects.exists()
    assert not [p for p in storage.store_root().rglob("*") if p.is_file()]


def test_upload_limits_and_failures(alice, settings):
    settings.MAX_UPLOAD_BYTES = 64
    too_big = _upload(alice, "m", m.affine(1, 1), **XHR)
    assert too_big.status_code == 413 and "larger than the upload limit of 64 bytes" in too_big.json()["error"]
    settings.MAX_UPLOAD_BYTES = 10**9
    _upload(alice, "m", m.affine(1, 1))
    failed = _upload(alice, "m", failing_model(), url="/models/m/upload/")
    assert failed["Location"] == "/models/m/versions/2/"
    page = _text(alice.get(failed["Location"]))
    assert 'data-state="FAILED"' in page and 'id="version-reason">ONNX checker:' in page
    missing_name = _post(alice, "/upload/", {"team": "ml", "file": _file(m.affine(2, 2))})
    assert missing_name.status_code == 400 and "name: This field is required." in _text(missing_name)


def test_an_upload_with_a_config(alice):
    """The form's config.pbtxt: applied to the model; a field this server
    does not support is shown by name and nothing is stored."""
    form = _text(alice.get("/upload/"))
    assert 'name="config"' in form and "Triton config.pbtxt (optional)" in form
    fields = {"name": "cfg", "team": "ml", "description": "", "file": _file(m.affine(1, 1))}
    refused = _post(
        alice, "/upload/", {**fields, "config": "max_batch_size: 4\nmodel_transaction_policy { decoupled: true }"}
    )
    assert refused.status_code == 400
    assert "not supported by this server: &#x27;model_transaction_policy.decoupled&#x27;" in _text(refused)
    assert not RegisteredModel.objects.exists()
    fields["file"] = _file(m.affine(1, 1))
    done = _post(alice, "/upload/", {**fields, "config": "max_batch_size: 4\ndynamic_batching { }"})
    assert done.status_code == 302, _text(done)
    model = RegisteredModel.objects.get(name="cfg")
    assert model.max_batch_size == 4 and "dynamic_batching" in model.config
    assert 'name="config"' in _text(alice.get("/models/cfg/upload/"))  # also for a new version


def test_uploads_to_other_teams_are_refused():
    person("alice", "ml")
    person("bob", "vision")
    alice, bob = Client(), Client()
    alice.login(username="alice", password=PASSWORD)
    bob.login(username="bob", password=PASSWORD)
    _upload(alice, "iris", m.affine(1, 1))
    response = _upload(bob, "iris", m.affine(2, 2), url="/models/iris/upload/")
    assert response.status_code == 403 and "belongs to team ml" in _text(response)
    new = _post(bob, "/upload/", {"name": "x", "team": "ml", "file": _file(m.affine(2, 2))})
    assert new.status_code == 403 and "not a member of team ml" in _text(new)  # ml is not one of bob's teams
    assert "Upload a new version" not in _text(bob.get("/models/iris/"))
    assert ModelVersion.objects.count() == 1


def test_settings_labels_and_version_actions(alice):
    for payload in (m.affine(1, 1), failing_model(), m.affine(3, 1)):
        _upload(alice, "p", payload, url="/models/p/upload/" if RegisteredModel.objects.exists() else "/upload/")
    ok = _post(alice, "/models/p/settings", {"description": "three", "version_policy": "all", "latest_versions": 1})
    assert ok.status_code == 302
    assert RegisteredModel.objects.get().version_policy == "all"
    nothing = _post(
        alice, "/models/p/settings", {"version_policy": "specific", "latest_versions": 1, "specific_versions": "2"}
    )
    assert nothing.status_code == 409 and "would serve no version" in _text(nothing)
    assert RegisteredModel.objects.get().version_policy == "all"
    garbage = _post(
        alice, "/models/p/settings", {"version_policy": "specific", "latest_versions": 1, "specific_versions": "one"}
    )
    assert garbage.status_code == 400 and "positive integers" in _text(garbage)

    assert _post(alice, "/models/p/labels", {"label": "stable", "version": 3}).status_code == 302
    failed_label = _post(alice, "/models/p/labels", {"label": "canary", "version": 2})
    assert failed_label.status_code == 409 and "version 2 of &#x27;p&#x27; is FAILED" in _text(failed_label)
    missing = _post(alice, "/models/p/labels", {"label": "canary", "version": 9})
    assert missing.status_code == 409 and "has no version 9" in _text(missing)
    options = re.findall(r'<option value="(\d+)"', _text(alice.get("/models/p/")))
    assert options.count("2") == 0 and "3" in options  # the select offers READY versions only
    assert dict(VersionLabel.objects.values_list("name", "version__number")) == {"stable": 3}
    retire = _post(alice, "/models/p/versions/3/retire", {})
    assert retire.status_code == 409 and "stable point at version 3" in _text(retire)
    assert _post(alice, "/models/p/labels/stable/delete", {}).status_code == 302
    assert _post(alice, "/models/p/versions/3/retire", {}).status_code == 302
    assert ModelVersion.objects.get(number=3).state == "UNAVAILABLE"
    assert _post(alice, "/models/p/versions/2/delete", {}).status_code == 302
    assert sorted(ModelVersion.objects.values_list("number", flat=True)) == [1, 3]
    assert _post(alice, "/models/p/versions/1/explode", {}).status_code == 404
    page = _text(alice.get("/models/p/"))
    for action in ("model.policy", "label.set", "label.delete", "version.retire", "version.delete"):
        assert action in page


def test_forms_without_csrf_are_refused(alice):
    assert alice.post("/models/whatever/settings", {"version_policy": "all"}).status_code == 403
    assert alice.post("/upload/", {"name": "m", "team": "ml", "file": _file(m.affine(1, 1))}).status_code == 403
    assert alice.post("/tokens/", {"name": "x"}).status_code == 403
    assert not RegisteredModel.objects.exists() and not ApiToken.objects.exists()
    assert not [p for p in storage.store_root().rglob("*") if p.is_file()]


def test_tokens_are_shown_once_and_revocable(alice):
    posted = _post(alice, "/tokens/", {"name": "nightly", "team": "ml"})
    assert (posted.status_code, posted["Location"]) == (302, "/tokens/")  # post/redirect/get
    created = alice.get(posted["Location"])
    assert created.status_code == 200 and created["Cache-Control"] == "no-store"
    plain = re.search(r'id="token-value">(mh_[^<]+)<', _text(created)).group(1)
    token = ApiToken.objects.get()
    assert (token.name, token.team.name, token.prefix) == ("nightly", "ml", plain[:10])
    listing = _text(alice.get("/tokens/"))  # a reload: shown no more, nothing created
    assert plain not in listing and f"{plain[:10]}…" in listing
    assert ApiToken.objects.count() == 1
    assert not any(plain in str(value) for value in alice.session.values())  # dropped from the session
    api = Client().get("/api/models/", HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert api.status_code == 200
    assert _post(alice, f"/tokens/{token.pk}/revoke", {}).status_code == 302
    assert Client().get("/api/models/", HTTP_AUTHORIZATION=f"Bearer {plain}").status_code == 401
    person("bob", "vision")
    bob = Client()
    bob.login(username="bob", password=PASSWORD)
    other, _ = ApiToken.objects.get(), None
    assert _post(bob, f"/tokens/{other.pk}/revoke", {}).status_code == 404
    assert AuditEvent.objects.filter(action="token.revoke").count() == 1


def test_tokens_may_expire_and_the_page_shows_when(alice):
    posted = _post(alice, "/tokens/", {"name": "quarterly", "expires_in": "90d"})
    assert posted.status_code == 302
    token = ApiToken.objects.get(name="quarterly")
    lifetime = token.expires_at - token.created_at
    assert abs(lifetime.total_seconds() - 90 * 86400) < 5
    listing = _text(alice.get("/tokens/"))
    row = re.search(r'<tr data-token="quarterly">(.*?)</tr>', listing, re.S).group(1)
    assert f'<td class="expires">{token.expires_at:%Y-%m-%d %H:%M}</td>' in row and "Revoke" in row
    plain = accounts.token_create(user=token.user, name="stale")[1]
    ApiToken.objects.filter(name="stale").update(expires_at=timezone.now() - timedelta(seconds=1))
    row = re.search(r'<tr data-token="stale">(.*?)</tr>', _text(alice.get("/tokens/")), re.S).group(1)
    assert "expired" in row and "Revoke" not in row
    refused = Client().get("/api/models/", HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert refused.status_code == 401 and "API token 'stale' expired at" in refused.json()["error"]
    assert _post(alice, "/tokens/", {"name": "x", "expires_in": "2d"}).status_code == 400  # not a choice


def test_admin_is_registered_for_every_registry_model():
    person("root", superuser=True)
    client = Client()
    client.login(username="root", password=PASSWORD)
    for path in (
        "team", "teammembership", "registeredmodel", "modelversion", "versionlabel", "apitoken", "auditevent",
        "registrystamp",
    ):  # fmt: skip
        assert client.get(f"/admin/models_store/{path}/").status_code == 200, path


def test_instance_group_on_the_model_page(alice):
    _upload(alice, "placed", m.affine(1, 1), url="/upload/")
    page = _text(alice.get("/models/placed/"))
    assert "any device" in page  # no instance group yet
    changed = _post(
        alice,
        "/models/placed/settings",
        {
            "version_policy": "latest",
            "latest_versions": 1,
            "instance_kind": "KIND_GPU",
            "instance_gpus": "0, 1",
            "instance_count": 2,
        },
    )
    assert changed.status_code == 302
    assert RegisteredModel.objects.get().instance_group == [
        {"name": "", "kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}
    ]
    assert "cuda:0, cuda:1 \u00d7 2" in _text(alice.get("/models/placed/"))
    wrong = _post(
        alice,
        "/models/placed/settings",
        {"version_policy": "latest", "latest_versions": 1, "instance_kind": "KIND_CPU", "instance_gpus": "3"},
    )
    assert wrong.status_code == 400 and "gpus are only for KIND_GPU" in _text(wrong)


def test_dynamic_batching_on_the_model_page(alice, tmp_path):
    """A model whose config.pbtxt asks for dynamic batching shows it; others say it is off."""
    m.write_model(
        tmp_path,
        "batcher",
        m.affine(1, 1),
        config="max_batch_size: 8\ndynamic_batching { preferred_batch_size: [4, 8] max_queue_delay_microseconds: 2500 }\n",
    )
    m.write_model(tmp_path, "plain", m.affine(1, 1))
    import_repository(tmp_path)
    page = _text(alice.get("/models/batcher/"))
    assert "on: batches of up to 8; waiting at most 2.5 ms for a fuller batch; preferred sizes 4, 8" in page
    assert "off (each request runs alone)" in _text(alice.get("/models/plain/"))


def test_priority_levels_and_queue_policies_on_the_model_page(alice, tmp_path):
    m.write_model(
        tmp_path,
        "levels",
        m.affine(1, 1),
        config="max_batch_size: 4\ndynamic_batching { priority_levels: 2 default_priority_level: 2 "
        "default_queue_policy { max_queue_size: 64 } priority_queue_policy { key: 1 value: { "
        "default_timeout_microseconds: 50000 allow_timeout_override: true max_queue_size: 16 } } }\n",
    )
    m.write_model(
        tmp_path, "unbatched", m.slow_loop(), config="dynamic_batching { default_queue_policy { max_queue_size: 3 } }\n"
    )
    import_repository(tmp_path)
    page = _text(alice.get("/models/levels/"))
    assert (
        "2 priority levels (default 2); at most 64 queued; "
        "level 1: at most 16 queued, refused after 50 ms in the queue (a request may shorten it)"
    ) in page
    assert "on: one request at a time; at most 3 queued" in _text(alice.get("/models/unbatched/"))


def test_traffic_split_form_promote_and_rollback(alice):
    for scale in (1.0, 2.0):
        _upload(alice, "canaried", m.affine(scale, 0.0), url="/upload/" if scale == 1.0 else "/models/canaried/upload/")
    assert _post(alice, "/models/canaried/labels", {"label": "stable", "version": "1"}).status_code == 302
    assert _post(alice, "/models/canaried/labels", {"label": "canary", "version": "2"}).status_code == 302
    page = _text(alice.get("/models/canaried/"))
    assert 'id="weight-stable"' in page and 'id="promote-canary"' in page and "none: requests that name no" in page

    response = _post(alice, "/models/canaried/traffic", {"weight-stable": "90", "weight-canary": "10"})
    assert response.status_code == 302
    assert RegisteredModel.objects.get(name="canaried").traffic == {"canary": 10, "stable": 90}
    page = _text(alice.get("/models/canaried/"))
    assert "stable (v1) 90%" in page and "canary (v2) 10%" in page

    bad = _post(alice, "/models/canaried/traffic", {"weight-stable": "90", "weight-canary": "20"})
    assert bad.status_code == 409 and "add up to 100, not 110" in _text(bad)
    bad = _post(alice, "/models/canaried/traffic", {"weight-stable": "ninety"})
    assert bad.status_code == 400 and "whole number from 0 to 100" in _text(bad)
    assert RegisteredModel.objects.get(name="canaried").traffic == {"canary": 10, "stable": 90}

    assert _post(alice, "/models/canaried/traffic/rollback", {}).status_code == 302
    assert RegisteredModel.objects.get(name="canaried").traffic == {"canary": 0, "stable": 100}
    assert _post(alice, "/models/canaried/traffic/promote", {}).status_code == 302
    assert VersionLabel.objects.get(model__name="canaried", name="stable").version.number == 2
    assert _post(alice, "/models/canaried/traffic/nope", {}).status_code == 404
    actions = list(AuditEvent.objects.filter(action__startswith="traffic.").values_list("action", "actor_name"))
    assert sorted(actions) == [("traffic.promote", "alice"), ("traffic.rollback", "alice"), ("traffic.set", "alice")]

    person("bob", "vision")
    bob = Client(enforce_csrf_checks=True)
    assert bob.login(username="bob", password=PASSWORD)
    assert _post(bob, "/models/canaried/traffic/promote", {}).status_code == 403


def test_the_web_ui_refuses_to_delete_what_the_split_uses_and_says_why(alice):
    """F13 on the web UI: deleting a version or a label the traffic split
    sends requests to answers 409 with the reason on the page; nothing changes."""
    import html

    for scale in (1.0, 2.0):
        _upload(alice, "split", m.affine(scale, 0.0), url="/upload/" if scale == 1.0 else "/models/split/upload/")
    for label, version in (("stable", "1"), ("canary", "2")):
        assert _post(alice, "/models/split/labels", {"label": label, "version": version}).status_code == 302
    assert _post(alice, "/models/split/traffic", {"weight-stable": "80", "weight-canary": "20"}).status_code == 302

    refused = _post(alice, "/models/split/versions/2/delete", {})
    error = re.search(r'id="page-error" role="alert">([^<]*)<', _text(refused)).group(1)
    assert refused.status_code == 409 and html.unescape(error) == (
        "the traffic split of 'split' sends 20% of its requests to label 'canary', which points at version 2; "
        "change the split first"
    )
    refused = _post(alice, "/models/split/labels/stable/delete", {})
    error = re.search(r'id="page-error" role="alert">([^<]*)<', _text(refused)).group(1)
    assert refused.status_code == 409 and "sends 80% of its requests to label 'stable'" in html.unescape(error)
    assert ModelVersion.objects.filter(model__name="split").count() == 2
    assert RegisteredModel.objects.get(name="split").traffic == {"canary": 20, "stable": 80}
    assert not AuditEvent.objects.filter(action__in=["version.delete", "label.delete"]).exists()

    assert _post(alice, "/models/split/traffic/rollback", {}).status_code == 302  # canary 0: it may go now
    assert _post(alice, "/models/split/versions/2/delete", {}).status_code == 302
    assert RegisteredModel.objects.get(name="split").traffic == {"stable": 100}


def test_the_admin_protects_what_the_split_uses(alice):
    """The operator's back door keeps the rule: a version or label the split
    sends requests to is listed as protected and not deleted; a label of the
    split cannot be renamed; the split itself is not edited there."""
    import html

    for scale in (1.0, 2.0):
        _upload(alice, "split", m.affine(scale, 0.0), url="/upload/" if scale == 1.0 else "/models/split/upload/")
    for label, version in (("stable", "1"), ("canary", "2")):
        assert _post(alice, "/models/split/labels", {"label": label, "version": version}).status_code == 302
    assert _post(alice, "/models/split/traffic", {"weight-stable": "80", "weight-canary": "20"}).status_code == 302
    person("root", superuser=True)
    root = Client()
    assert root.login(username="root", password=PASSWORD)
    version = ModelVersion.objects.get(model__name="split", number=2)
    canary = VersionLabel.objects.get(model__name="split", name="canary")
    for url in (
        f"/admin/models_store/modelversion/{version.pk}/delete/",
        f"/admin/models_store/versionlabel/{canary.pk}/delete/",
    ):
        page = html.unescape(_text(root.get(url)))
        assert "sends 20% of its requests to label 'canary'" in page, url
        root.post(url, {"post": "yes"})
    bulk = {"action": "delete_selected", "_selected_action": [version.pk], "post": "yes"}
    root.post("/admin/models_store/modelversion/", bulk)
    assert ModelVersion.objects.filter(model__name="split").count() == 2
    assert VersionLabel.objects.filter(model__name="split").count() == 2
    renamed = root.post(
        f"/admin/models_store/versionlabel/{canary.pk}/change/",
        {"model": canary.model_id, "name": "blue", "version": version.pk},
    )
    assert renamed.status_code == 200 and "is in the traffic split of" in html.unescape(_text(renamed))
    assert VersionLabel.objects.get(pk=canary.pk).name == "canary"
    model = RegisteredModel.objects.get(name="split")
    assert (
        "traffic"
        not in root.get(f"/admin/models_store/registeredmodel/{model.pk}/change/").context["adminform"].form.fields
    )
    assert model.traffic == {"canary": 20, "stable": 80}


def test_with_tokens_required_the_web_ui_shows_a_team_only_its_models(alice, settings):
    """F14 on the web UI (and the management API through the web UI's
    session): with INFERENCE_REQUIRE_TOKEN, another team's model is not
    listed and its pages answer 404; operators see every model. Off, every
    signed-in user sees every model (the shared platform)."""
    _upload(alice, "iris", m.affine(1, 1))
    person("bob", "vision")
    person("root", superuser=True)
    bob, root = Client(), Client()
    assert bob.login(username="bob", password=PASSWORD) and root.login(username="root", password=PASSWORD)
    assert 'data-model="iris"' in _text(bob.get("/models/")) and bob.get("/models/iris/").status_code == 200
    assert [m["name"] for m in bob.get("/api/models/").json()["results"]] == ["iris"]
    settings.INFERENCE_REQUIRE_TOKEN = True
    assert 'data-model="iris"' not in _text(bob.get("/models/"))
    for path in ("/models/iris/", "/models/iris/versions/1/", "/models/iris/upload/"):
        assert bob.get(path).status_code == 404, path
        assert alice.get(path).status_code == 200 and root.get(path).status_code == 200, path
    assert bob.get("/api/models/").json()["results"] == [] and bob.get("/api/models/iris/audit/").status_code == 404
    assert [m["name"] for m in root.get("/api/models/").json()["results"]] == ["iris"]
    assert 'data-model="iris"' in _text(alice.get("/models/")) and 'data-model="iris"' in _text(root.get("/models/"))
    assert _post(bob, "/models/iris/versions/1/delete", {}).status_code == 404
    taken = _post(bob, "/upload/", {"name": "iris", "team": "vision", "file": _file(m.affine(2, 2))})
    assert taken.status_code == 409 and "is taken (by a model of another team)" in _text(taken)
    assert ModelVersion.objects.count() == 1


def test_an_ensemble_is_uploaded_as_its_config_alone(alice):
    """The upload page takes an ensemble's config.pbtxt without a file; its
    version page lists the steps with their pinned versions; without a
    file and without an ensemble's config, the page says what is missing."""
    from tests.support.repository import _ensemble

    assert _upload(alice, "pre", m.standardize()).status_code == 302
    config = _ensemble(
        "pipe",
        '{ name: "RAW" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "F" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [("pre", -1, {"raw": "RAW"}, {"features": "F"})],
    )
    response = _post(alice, "/upload/", {"name": "pipe", "team": "ml", "description": "", "config": config})
    assert (response.status_code, response["Location"]) == (302, "/models/pipe/versions/1/")
    page = _text(alice.get("/models/pipe/versions/1/"))
    assert 'id="ensemble-steps"' in page and 'href="/models/pre/versions/1/"' in page and "raw ← RAW" in page
    assert "step 1: model &#x27;pre&#x27; version 1 (the version serving now)" in page  # the log
    missing = _post(alice, "/upload/", {"name": "nothing", "team": "ml", "description": "", "config": ""})
    assert missing.status_code == 400 and "no model file in the upload" in _text(missing)
    assert not RegisteredModel.objects.filter(name="nothing").exists()


#: The Content-Security-Policy of every page (hosting/settings/web.py): directive -> its sources.
CSP = {
    "default-src": "'self'", "script-src": "'self'", "style-src": "'self'", "img-src": "'self' data:",
    "font-src": "'self'", "connect-src": "'self'", "object-src": "'none'", "base-uri": "'none'",
    "form-action": "'self'", "frame-ancestors": "'none'",
}  # fmt: skip


def _policy(response) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";"))


def test_every_page_has_the_content_security_policy_and_no_inline_code(alice):
    """The web UI's pages, the sign-in page, the admin and the API docs carry
    the policy (frame-ancestors 'none' among it); no template of ours (nor
    the API docs page) holds an inline script, style or event handler,
    which the policy would block."""
    from pathlib import Path

    assert _upload(alice, "pipe", m.affine(1, 1)).status_code == 302
    pages = ["/models/", "/models/pipe/", "/models/pipe/versions/1/", "/upload/", "/tokens/", "/api/docs/"]
    for path in pages:
        response = alice.get(path)
        assert (response.status_code, _policy(response)) == (200, CSP), path
    assert _policy(Client().get("/accounts/login/")) == CSP
    assert _policy(Client().get("/admin/login/")) == CSP
    docs = _text(alice.get("/api/docs/"))
    assert "<style" not in docs and re.findall(r"<script[^>]*>", docs) == [
        '<script src="/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js">',
        '<script src="/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-standalone-preset.js">',
        '<script src="/api/docs/?script=">',
    ]
    script = alice.get("/api/docs/?script=")
    assert script["Content-Type"].startswith("application/javascript") and b"SwaggerUIBundle(" in script.content
    inline = re.compile(r"<style|<script(?![^>]*\bsrc=)[^>]*>|\sstyle=|\son[a-z]+=", re.IGNORECASE)
    templates = sorted((Path(__file__).parents[2] / "templates").rglob("*.html"))
    assert len(templates) > 10
    assert {t.name: inline.findall(t.read_text()) for t in templates if inline.search(t.read_text())} == {}


def test_favicon_is_served_and_linked(alice):
    """``/favicon.ico`` (asked for by browsers on every page) is a 32x32 icon, and pages link an SVG one."""
    answer = Client().get("/favicon.ico")
    assert answer.status_code == 200
    body = b"".join(answer.streaming_content) if answer.streaming else answer.content
    assert body[:6] == b"\x00\x00\x01\x00\x01\x00"  # an ICO file with one image
    assert (body[6], body[7]) == (32, 32)
    page = _text(alice.get("/models/"))
    link = re.search(r'<link rel="icon" href="([^"]+\.svg)"', page)
    assert link is not None and '<link rel="icon" href="/favicon.ico"' in page
    svg = Client().get(link.group(1))
    assert svg.status_code == 200
    svg_body = b"".join(svg.streaming_content) if svg.streaming else svg.content
    assert svg_body.startswith(b"<svg")
