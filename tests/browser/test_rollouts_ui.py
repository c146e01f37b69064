"""The "Rollout" panel of a model page (headless Chromium against a live
``serve``): alice starts a rollout from the page's form, the panel shows
its steps with the current one marked and, once the server's ticker has
judged the first step, the analysis's numbers (the same as the management
API's) and verdict; Pause and Abort (after its confirmation) from the page
change its state, and the split is back on stable."""

from __future__ import annotations

import json

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.support import onnx_models as m
from tests.support.live import bearer, infer_json, multipart, request, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.interop]

MODEL = "rolled-ui"


def _api(server, method: str, path: str, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    return request(server, method, path, data, {**bearer(server.token), "Content-Type": "application/json"})


def test_start_a_rollout_see_its_analysis_pause_and_abort_it(page, ui_server, shots):
    for scale in (1.0, 2.0):
        body, kind = multipart({"team": "ml"}, m.affine(scale, 0.0))
        headers = {**bearer(ui_server.token), "Content-Type": kind}
        status, version = request(ui_server, "POST", f"/api/models/{MODEL}/versions/", body, headers)
        assert status == 201 and version["state"] == "READY", version
    assert _api(ui_server, "PUT", f"/api/models/{MODEL}/labels/stable/", {"version": 1})[0] == 200

    page.goto(f"/models/{MODEL}/")
    panel = page.locator("#rollout-panel")
    expect(panel).to_contain_text("No rollout yet")
    page.select_option("#rollout-start-form #id_canary_version", "2")
    page.fill("#rollout-start-form #id_steps", "50, 100")
    page.fill("#rollout-start-form #id_pause_seconds", "1")
    page.fill("#rollout-start-form #id_min_requests", "5")
    # Not a latency test: a tiny model's p99 over 5-35 requests is its slowest one (a cold session's first run in
    # one of the two HTTP processes: 2.7 ms against 1.6 ms, rolled back at the default 1.5x); errors decide here.
    page.fill("#rollout-start-form #id_max_p99_ratio", "100")
    page.click("#rollout-start-button")
    expect(page.locator(".messages")).to_contain_text("Rolling out version 2: 50%")
    expect(panel.locator("#rollout-state")).to_have_text("running")
    expect(panel.locator("#rollout-steps li")).to_have_text([r"50% ← now", "100%"])
    expect(panel.locator("#rollout-steps li.current")).to_have_attribute("data-weight", "50")

    for _ in range(40):  # unversioned: about half to each version
        assert infer_json(ui_server, None, MODEL, np.ones((1, 4), np.float32))[0] == 200
    status, page_of_rollouts = _api(ui_server, "GET", f"/api/models/{MODEL}/rollouts/")
    rollout_id = page_of_rollouts["results"][0]["id"]

    def judged() -> bool:
        return _api(ui_server, "GET", f"/api/models/{MODEL}/rollouts/{rollout_id}/")[1]["step"] == 1

    assert wait_for(judged, timeout=30)
    rollout = _api(ui_server, "GET", f"/api/models/{MODEL}/rollouts/{rollout_id}/")[1]
    first = rollout["analyses"][0]
    assert first["verdict"] == "advance" and first["canary"]["requests"] + first["stable"]["requests"] == 40
    page.reload()
    expect(panel.locator("#rollout-steps li.current")).to_have_attribute("data-weight", "100")
    row = panel.locator("#rollout-analyses tbody tr").first
    expect(row).to_have_attribute("data-verdict", "advance")
    cells = row.locator("td")
    expect(cells.nth(1)).to_have_text("50%")
    expect(cells.nth(2)).to_have_text(str(first["canary"]["requests"]))
    expect(cells.nth(3)).to_have_text("0")
    expect(cells.nth(6)).to_have_text(str(first["stable"]["requests"]))
    shots.take(panel, "rollout", doc=True)

    panel.locator("#rollout-pause").click()  # the 100% step gets no requests: it waits, extended
    expect(page.locator(".messages")).to_contain_text("paused")
    expect(panel.locator("#rollout-state")).to_have_text("paused")
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    panel.locator("#rollout-abort").click()
    expect(page.locator(".messages")).to_contain_text("aborted")
    expect(panel.locator("#rollout-state")).to_have_text("aborted")
    expect(panel.locator("#rollout-pause")).to_have_count(0)
    assert asked == ["Abort the rollout? Every request that names no version goes back to version 1."]
    model = _api(ui_server, "GET", f"/api/models/{MODEL}/")[1]
    assert model["traffic"] == {"canary": 0, "stable": 100}
    audit = _api(ui_server, "GET", f"/api/models/{MODEL}/audit/")[1]["results"]
    rollout_events = [(e["action"], e["actor_name"]) for e in reversed(audit) if e["action"].startswith("rollout.")]
    assert rollout_events == [
        ("rollout.started", "alice"), ("rollout.advanced", "system"), ("rollout.paused", "alice"),
        ("rollout.aborted", "alice"),
    ]  # fmt: skip
