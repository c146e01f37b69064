"""Deleting things in Chromium (alice, owner of team ml, against a live
``serve``): a model's delete is a confirmation page (the Django admin's
pattern, no JavaScript needed) that lists what goes, or why it cannot go
(its traffic split), then deletes it: the API answers 404, a
``model.deleted`` webhook reaches a real receiver naming alice, and that
webhook's page names the deleted model without a link. The other
destructive buttons (a label's delete, a version's retire) ask first; a
dismissed question changes nothing."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.support import onnx_models as m
from tests.support.browser import confirming, csp_violations
from tests.support.live import bearer, multipart, request
from tests.support.webhook_receiver import Receiver

pytestmark = [pytest.mark.browser, pytest.mark.interop]

MODEL = "doomed-ui"


def _api(server, method: str, path: str, body: dict | None = None):
    data = json.dumps(body).encode() if body is not None else b""
    headers = {**bearer(server.token), **({"Content-Type": "application/json"} if body is not None else {})}
    return request(server, method, path, data, headers)


def _upload(server, model: str, scale: float) -> dict:
    body, kind = multipart({"team": "ml"}, m.affine(scale, 1.0))
    status, version = request(
        server, "POST", f"/api/models/{model}/versions/", body, {**bearer(server.token), "Content-Type": kind}
    )
    assert status == 201 and version["state"] == "READY", version
    return version


def test_label_delete_and_retire_ask_first(page, ui_server):
    model = "asked-ui"
    _upload(ui_server, model, 2.0)
    _upload(ui_server, model, 3.0)
    assert _api(ui_server, "PUT", f"/api/models/{model}/labels/beta/", {"version": 1})[0] == 200
    page.goto(f"/models/{model}/")
    delete_label = page.locator("form[action$='/labels/beta/delete'] button")
    asked = confirming(page, delete_label.click, accept=False)
    assert asked == ["Delete version label beta (version 1)? Requests naming it will fail."]
    assert _api(ui_server, "GET", f"/api/models/{model}/")[1]["labels"] == {"beta": 1}  # dismissed: kept
    confirming(page, delete_label.click)
    expect(page.locator(".messages")).to_contain_text("beta")
    assert _api(ui_server, "GET", f"/api/models/{model}/")[1]["labels"] == {}

    page.goto(f"/models/{model}/versions/1/")
    asked = confirming(page, lambda: page.click("#retire"), accept=False)
    assert asked == [f"Retire version 1 of {model}? It stops serving (it can be restored)."]
    assert _api(ui_server, "GET", f"/api/models/{model}/versions/1/")[1]["state"] == "READY"
    confirming(page, lambda: page.click("#retire"))
    expect(page.locator(".messages")).to_contain_text("Retired version 1")
    assert _api(ui_server, "GET", f"/api/models/{model}/versions/1/")[1]["state"] == "UNAVAILABLE"
    asked = confirming(page, lambda: page.click("#delete"))
    assert asked == [f"Delete version 1 of {model} and its file? Its number is never reused."]
    expect(page.locator(".messages")).to_contain_text("Deleted version 1")
    assert _api(ui_server, "GET", f"/api/models/{model}/versions/1/")[0] == 404


def test_delete_a_model_from_its_page(page, ui_server, shots):
    with Receiver() as hooks:
        page.goto("/webhooks/")
        page.select_option("#webhook-form #id_team", "ml")
        page.fill("#webhook-form #id_url", hooks.url)
        page.check('#webhook-form input[value="model.deleted"]')
        page.click("#webhook-form button[type=submit]")
        webhook_url = page.url

        for scale in (2.0, 3.0):
            _upload(ui_server, MODEL, scale)
        assert _api(ui_server, "PUT", f"/api/models/{MODEL}/labels/stable/", {"version": 2})[0] == 200
        assert _api(ui_server, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {"stable": 100}})[0] == 200

        page.goto(f"/models/{MODEL}/")
        page.click("#model-delete")
        expect(page).to_have_url(f"http://{ui_server.http_url}/models/{MODEL}/delete")
        # Its split sends requests: the page says why it cannot go, and has no button.
        expect(page.locator("#delete-blockers")).to_contain_text(
            f"the traffic split of '{MODEL}' sends 100% of its requests to label 'stable'; change the split first"
        )
        expect(page.locator("#model-delete-confirm")).to_have_count(0)

        assert _api(ui_server, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {}})[0] == 200
        page.reload()
        what = page.locator("#delete-what")
        expect(what).to_contain_text("2 versions (v2 READY, v1 READY) and their model files")
        expect(what).to_contain_text("version label stable")
        shots.take(page, "model-delete", doc=True)
        page.click("#model-delete-cancel")  # "No, keep it": back to the model, nothing deleted
        expect(page).to_have_url(f"http://{ui_server.http_url}/models/{MODEL}/")
        assert _api(ui_server, "GET", f"/api/models/{MODEL}/")[0] == 200

        page.click("#model-delete")
        page.click("#model-delete-confirm")
        expect(page).to_have_url(f"http://{ui_server.http_url}/models/")
        expect(page.locator(".messages")).to_have_text(f"Deleted model {MODEL} with its versions and their files.")
        expect(page.locator(f"#model-list a:text-is('{MODEL}')")).to_have_count(0)
        assert _api(ui_server, "GET", f"/api/models/{MODEL}/")[0] == 404

        hooks.wait_for(1)
        deleted = [json.loads(r.body) for r in hooks.received if json.loads(r.body)["type"] == "model.deleted"]
        assert [payload["data"] for payload in deleted] == [{"model": MODEL, "team": "ml", "actor": "alice"}]

        page.goto(webhook_url)
        row = page.locator("tr.delivery").first
        expect(row.locator(".state")).to_contain_text("SUCCEEDED")
        expect(row.locator("td.model")).to_have_text(f"{MODEL} (deleted)")
        expect(row.locator("td.model a")).to_have_count(0)  # no link to a page that is gone
        asked = confirming(page, lambda: page.click("#webhook-delete button"))
        assert asked == [
            f"Delete the webhook to {hooks.url}? Its deliveries go with it and no event is sent there again."
        ]
        expect(page.locator(".messages")).to_contain_text("Deleted the webhook")
    assert csp_violations(page) == []
