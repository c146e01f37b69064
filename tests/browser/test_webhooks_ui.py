"""Webhooks in the web UI (headless Chromium against a live ``serve``):
alice adds a webhook of team ml to a real receiver on 127.0.0.1, sees its
secret once, an upload's ``version.ready`` reaches the receiver (500 then
200) signed with that secret, the webhook's page shows both attempts and
their answers, the Redeliver button sends it again with the same
``webhook-id``, the model page lists the delivery; a private address is
refused with the reason; Delete removes the webhook."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from standardwebhooks import Webhook

from tests.support import onnx_models as m
from tests.support.browser import confirming
from tests.support.live import bearer, multipart, request
from tests.support.webhook_receiver import Receiver

pytestmark = [pytest.mark.browser, pytest.mark.interop]


def test_add_a_webhook_see_its_deliveries_and_redeliver(page, ui_server, shots):
    with Receiver([500]) as hooks:
        target = hooks.url
        page.goto("/webhooks/")
        page.select_option("#webhook-form #id_team", "ml")
        page.fill("#webhook-form #id_url", hooks.url)
        page.check('#webhook-form input[value="label.moved"]')
        page.click("#webhook-form button[type=submit]")
        secret = page.locator("#secret-value").inner_text().strip()
        assert re.fullmatch(r"whsec_[A-Za-z0-9+/=]{44}", secret)
        webhook_url = page.url

        body, kind = multipart({"team": "ml"}, m.affine(5.0, 1.0))
        status, version = request(
            ui_server,
            "POST",
            "/api/models/hooked-ui/versions/",
            body,
            {**bearer(ui_server.token), "Content-Type": kind},
        )
        assert status == 201 and version["state"] == "READY", version
        received = hooks.wait_for(2)
        assert received[0].headers["webhook-id"] == received[1].headers["webhook-id"]
        payload = Webhook(secret).verify(received[1].body, received[1].headers)
        assert payload["type"] == "version.ready" and payload["data"]["model"] == "hooked-ui"

        page.goto(webhook_url)  # the secret is not shown again
        expect(page.locator("#secret-value")).to_have_count(0)
        row = page.locator("tr.delivery").first
        expect(row.locator(".state")).to_contain_text("SUCCEEDED")
        expect(row.locator("tr.attempt .status")).to_have_text(["500", "200"])
        expect(row).to_contain_text(received[0].headers["webhook-id"])
        expect(row).to_contain_text("answer 500 to request 1")
        shots.take(page, "webhook", doc=True)
        row.locator("button.redeliver").click()  # answered in the row, without a reload
        expect(row.locator("[role=status]")).to_have_text(
            f"Sending version.ready ({received[0].headers['webhook-id']}) again."
        )
        expect(page.locator(".messages")).to_have_count(0)
        third = hooks.wait_for(3)[2]
        assert third.headers["webhook-id"] == received[0].headers["webhook-id"]
        page.reload()
        expect(page.locator("tr.delivery").first.locator("tr.attempt .status")).to_have_text(["500", "200", "200"])
        expect(page.locator("tr.delivery").first).to_contain_text("redelivered by alice")

        page.goto("/models/hooked-ui/")
        expect(page.locator("#model-webhook-deliveries")).to_contain_text("version.ready")

    page.goto("/webhooks/")
    page.select_option("#webhook-form #id_team", "ml")
    page.fill("#webhook-form #id_url", "http://10.20.30.40/hooks")
    page.check('#webhook-form input[value="model.deleted"]')
    page.click("#webhook-form button[type=submit]")
    expect(page.locator("#webhook-form .error")).to_contain_text("a private address")
    expect(page.locator("#webhooks tbody tr[data-webhook]")).to_have_count(1)

    page.goto(webhook_url)
    # Pause is not the primary button next to Delete, which is the danger one.
    assert page.locator("#webhook-pause button").get_attribute("class") == "secondary"
    assert page.locator("#webhook-delete button").get_attribute("class") == "danger"
    page.click("#webhook-pause button")
    expect(page.locator("#paused")).to_contain_text("Paused")
    page.click("#webhook-pause button")
    expect(page.locator(".messages")).to_contain_text("Resumed the webhook")
    expect(page.locator("#paused")).to_have_count(0)
    asked = confirming(page, lambda: page.click("#webhook-delete button"), accept=False)
    assert asked == [f"Delete the webhook to {target}? Its deliveries go with it and no event is sent there again."]
    expect(page.locator("#deliveries")).to_be_visible()  # dismissed: still there
    confirming(page, lambda: page.click("#webhook-delete button"))
    expect(page.locator(".messages")).to_contain_text("Deleted the webhook")
    expect(page.locator("#webhooks tbody tr[data-webhook]")).to_have_count(0)
