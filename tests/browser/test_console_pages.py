"""The console's comparison, notes and ensemble pages in Chromium: two
versions compared from the model page (signature, facts, what breaks, and
each version's traffic drawn from a known load), the default version's page
still showing how it differs, tags and descriptions edited on the pages and
found by the list's search, a custom chart range; and an ensemble's page
(its steps, pins and SVG graph, no instance settings, no "0 bytes")."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.support import onnx_models as m
from tests.support.browser import csp_violations
from tests.support.live import bearer, infer_json, multipart, request, wait_for
from tests.support.repository import _ensemble

pytestmark = [pytest.mark.browser, pytest.mark.interop]

MODEL = "compared_ui"
#: Requests sent to each version (by its number in the URL).
LOAD = {1: 5, 2: 3}


def _upload(server, name: str, payload: bytes) -> dict:
    body, kind = multipart({"team": "ml"}, payload)
    status, answer = request(
        server, "POST", f"/api/models/{name}/versions/", body, {**bearer(server.token), "Content-Type": kind}
    )
    assert status == 201, answer
    return answer


def _upload_config(server, name: str, config: str) -> dict:
    """An ensemble's upload: its config.pbtxt alone (no file)."""
    boundary = uuid.uuid4().hex
    fields = {"team": "ml", "config": config}
    body = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()
    )
    headers = {**bearer(server.token), "Content-Type": f"multipart/form-data; boundary={boundary}"}
    status, answer = request(
        server, "POST", f"/api/models/{name}/versions/", f"{body}--{boundary}--\r\n".encode(), headers
    )
    assert status == 201, answer
    return answer


def test_two_versions_compared_side_by_side(page, ui_server, shots):
    _upload(ui_server, MODEL, m.affine(2.0, 1.0))
    held = _upload(ui_server, MODEL, m.affine(3.0, 0.0, width=6))  # its input is wider: held, version 1 serves
    assert held["held"] and held["number"] == 2
    # released past the guard, and both served: version 2 the default
    for method, path, change in (
        ("POST", f"/api/models/{MODEL}/versions/2/promote?force=true", None),
        ("PATCH", f"/api/models/{MODEL}/", {"version_policy": "all", "force": True}),
    ):
        body = json.dumps(change).encode() if change else b""
        headers = {**bearer(ui_server.token), "Content-Type": "application/json"}
        status, answer = request(ui_server, method, path, body, headers)
        assert status == 200, answer
    for number, count in LOAD.items():
        x = np.ones((1, 4 if number == 1 else 6), np.float32)
        for _ in range(count):
            status, answer = infer_json(ui_server, ui_server.token, MODEL, x, version=str(number))
            assert status == 200, answer

    page.goto(f"/models/{MODEL}/")
    page.select_option("#compare-a", "1")
    page.select_option("#compare-b", "2")
    page.click("#compare-go")
    page.wait_for_url(f"**/models/{MODEL}/compare/?a=1&b=2")
    x_row = page.locator('#compare-signature tr[data-tensor="input:x"]')
    expect(x_row).to_have_attribute("data-same", "false")
    assert x_row.locator("td").all_inner_texts()[2:] == ["FP32 [-1, 4]", "FP32 [-1, 6]"]
    expect(page.locator("#breaking-forward")).to_contain_text("input 'x' dimension 1 is 6, not 4 ([-1, 4] -> [-1, 6])")
    expect(page.locator("#breaking-back")).to_contain_text("input 'x' dimension 1 is 4, not 6 ([-1, 6] -> [-1, 4])")
    serving_row = page.locator('#compare-facts tr[data-field="serving"]')
    assert serving_row.locator("td").all_inner_texts() == ["serving", "yes", "yes"]
    expect(page.locator('#compare-facts tr[data-field="sha256"]')).to_have_attribute("data-same", "false")
    expect(page.locator('#compare-facts tr[data-field="platform"]')).to_have_attribute("data-same", "true")

    def drawn() -> bool:  # each process writes its rollups every CHART_FLUSH_SECONDS (1 s here)
        page.evaluate("window.compareCharts.load('hour')")
        expect(page.locator("#compare-charts")).to_have_attribute("data-loaded-range", "hour")
        totals = page.evaluate(
            "[1, 2].map((n) => window.compareCharts.data.traffic[n === 1 ? 'a' : 'b'].total_requests)"
        )
        return totals == [LOAD[1], LOAD[2]]

    assert wait_for(drawn, timeout=30, interval=0.5), page.locator("#compare-totals").inner_text()
    sums = page.evaluate(
        """() => Chart.getChart(document.getElementById('compare-requests')).data.datasets
                 .map((d) => [d.label, d.data.reduce((a, b) => a + b, 0)])"""
    )
    assert sums == [["version 1", LOAD[1]], ["version 2", LOAD[2]]]
    expect(page.locator("#compare-totals")).to_contain_text(f"{LOAD[1]} requests to version 1 (0 errors)")
    shots.take(page, "compare", full_page=True, doc=True)
    assert csp_violations(page) == []

    # version 2 is the default: its page still says how it differs (from version 1) and links the comparison
    page.goto(f"/models/{MODEL}/versions/2/")
    compared = page.locator("#signature-compared")
    expect(compared).to_contain_text("This version is the default")
    expect(compared).to_contain_text("Compared with version 1, the one before it")
    expect(compared).to_contain_text("input 'x' dimension 1 is 6, not 4")
    page.click("#compare-link")
    page.wait_for_url(f"**/models/{MODEL}/compare/?a=1&b=2")


def test_tags_and_descriptions_edited_and_searched(page, ui_server):
    name = "tagged_ui"
    _upload(ui_server, name, m.affine(4.0, 0.0))
    page.goto(f"/models/{name}/")
    page.fill("#settings-form textarea[name=tags]", "owner=fraud-team\nstage=prod")
    page.fill("#settings-form textarea[name=description]", "Scores card payments")
    page.click("#settings-form button[type=submit]")
    expect(page.locator("#model-tags")).to_contain_text("owner: fraud-team")
    expect(page.locator("#model-description")).to_have_text("Scores card payments")
    page.goto(f"/models/{name}/versions/1/")
    page.click("#version-notes summary")
    page.fill("#notes-form textarea[name=description]", "trained on March data")
    page.fill("#notes-form textarea[name=tags]", "dataset=march\ndataset=april")
    page.click("#notes-save")
    expect(page.locator("#page-error")).to_contain_text("tags: line 2: tag 'dataset' is given twice")
    # the form stays open with what was typed
    expect(page.locator("#notes-form textarea[name=description]")).to_have_value("trained on March data")
    page.fill("#notes-form textarea[name=tags]", "dataset=march")
    page.click("#notes-save")
    expect(page.locator("#version-tags")).to_contain_text("dataset: march")
    expect(page.locator("#version-description")).to_have_text("trained on March data")

    page.goto("/models/")
    page.fill("#model-tag", "dataset=march")
    page.click("#model-filter button[type=submit]")
    expect(page.locator("#model-list tbody tr[data-model]")).to_have_count(1)
    expect(page.locator(f'#model-list tr[data-model="{name}"]')).to_contain_text("owner: fraud-team")
    page.fill("#model-tag", "")
    page.fill("#model-search", "card PAYMENTS")
    page.click("#model-filter button[type=submit]")
    expect(page.locator("#model-list tbody tr[data-model]")).to_have_count(1)
    page.fill("#model-search", "no such words")
    page.click("#model-filter button[type=submit]")
    expect(page.locator("#model-list tbody tr[data-model]")).to_have_count(0)


def test_a_custom_chart_range(page, ui_server):
    name = "ranged_ui"
    _upload(ui_server, name, m.affine(5.0, 0.0))
    for _ in range(4):
        assert infer_json(ui_server, ui_server.token, name, np.ones((1, 4), np.float32))[0] == 200
    page.goto(f"/models/{name}/")
    expect(page.locator("#charts")).to_have_attribute("data-loaded-range", "hour")
    # the last two days in the browser's local time (the datetime-local fields')
    offset = page.evaluate("new Date().getTimezoneOffset()")
    now = datetime.now(UTC) - timedelta(minutes=offset)
    page.fill("#chart-from", (now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M"))
    page.fill("#chart-to", (now + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M"))

    def shown() -> bool:
        page.click("#chart-apply")
        expect(page.locator("#charts")).to_have_attribute("data-loaded-range", "custom")
        return page.evaluate("window.modelCharts.data.series.at(-1).total_requests") == 4

    assert wait_for(shown, timeout=30, interval=0.5), page.locator("#chart-totals").inner_text()
    data = page.evaluate("({step: window.modelCharts.data.step_seconds, n: window.modelCharts.data.times.length})")
    assert data["step"] == 3600 and 48 <= data["n"] <= 50  # 48 h reaching past the folded minutes: hours
    expect(page.locator("#chart-totals")).to_contain_text("4 requests, 0 errors from")
    assert page.locator("#chart-range [aria-pressed=true]").count() == 0


def test_an_ensembles_page(page, ui_server, shots):
    for name, payload in (("ui_pre", m.standardize()), ("ui_twice", m.affine(2.0, 1.0)),
                          ("ui_negate", m.affine(-1.0, 3.0)), ("ui_join", m.add_pair())):  # fmt: skip
        _upload(ui_server, name, payload)
    config = _ensemble(
        "ui_diamond",
        '{ name: "RAW" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "SUM" data_type: TYPE_FP32 dims: [ -1, 4 ] }, { name: "LEFT" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [
            ("ui_pre", -1, {"raw": "RAW"}, {"features": "f"}),
            ("ui_twice", -1, {"x": "f"}, {"y": "LEFT"}),
            ("ui_negate", -1, {"x": "f"}, {"y": "right"}),
            ("ui_join", -1, {"a": "LEFT", "b": "right"}, {"sum": "SUM"}),
        ],
    )
    assert _upload_config(ui_server, "ui_diamond", config)["state"] == "READY"
    page.goto("/models/ui_diamond/")
    graph = page.locator("#ensemble-graph svg")
    expect(graph).to_be_visible()
    assert graph.locator("g.node.step").count() == 4 and graph.locator("g.edge").count() == 7
    columns = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#ensemble-graph g.node')]
                 .map((g) => [g.dataset.node, Number(g.querySelector('rect').getAttribute('x'))]))"""
    )
    # columns: the input, then each step after the last one it reads from, then the outputs
    assert columns["in:RAW"] < columns["step:0"] < columns["step:1"] == columns["step:2"] < columns["step:3"]
    assert columns["step:3"] < columns["out:SUM"] == columns["out:LEFT"]
    rows = page.locator("#ensemble-steps tbody tr").all_inner_texts()
    assert [r.split("\t")[1] for r in rows] == ["ui_pre", "ui_twice", "ui_negate", "ui_join"]
    assert all("v1 READY" in r for r in rows)
    expect(page.locator("#instance-group")).to_contain_text("an ensemble has none of its own")
    assert page.locator("#settings-form [name=instance_kind]").count() == 0
    assert page.locator("#dynamic-batching").count() == 0
    expect(page.locator('#versions tr[data-version="1"]')).to_contain_text("config only")
    assert "0 bytes" not in page.locator("main").inner_text()
    shots.take(page.locator("#ensemble-graph"), "ensemble", doc=True)
    assert csp_violations(page) == []
    with page.expect_navigation():
        graph.locator('g[data-node="step:3"] a').click()
    assert page.url.endswith("/models/ui_join/versions/1/")
    page.goto("/models/?q=ui_diamond")
    assert "0 bytes" not in page.locator("#model-list").inner_text()
    status, answer = request(
        ui_server, "PATCH", "/api/models/ui_diamond/", json.dumps({"instance_group": [{"kind": "KIND_CPU"}]}).encode(),
        {**bearer(ui_server.token), "Content-Type": "application/json"},
    )  # fmt: skip
    assert status == 400 and "is an ensemble" in answer["error"], answer
