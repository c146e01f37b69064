"""Shadow traffic in Chromium: started from the model page's form, a known
load sent, and the shadow version's page shows the comparison (the table's
figures and the chart's per-step shares, read from the Chart.js object)
equal to those computed here with numpy; stopped from the model page."""

from __future__ import annotations

import json

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.support import onnx_models as m
from tests.support.browser import confirming, csp_violations
from tests.support.live import bearer, infer_json, multipart, request, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.interop]

MODEL = "shadowed_ui"
SCALES = {1: 1.0, 2: 1.5}
WEIGHTS = {1: [[1, 0], [0, 1], [2, -1], [-1, 1]], 2: [[1, 1], [0, 1], [-1, -1], [-1, 2]]}
INPUTS = [
    np.array([[-1.0, -2.0, -0.5, -3.0]], np.float32),  # all negative: y is 0 in both versions
    np.array([[1.0, 2.0, 0.5, -3.0], [-0.25, 1.5, 2.0, 1.0]], np.float32),
    np.array([[-1.0, -0.75, -2.5, -0.25]], np.float32),
    np.array([[2.0, -1.0, 0.25, 0.5]], np.float32),
]


def _arrange(server) -> None:
    for number in SCALES:
        body, kind = multipart({"team": "ml"}, m.relu_scores(SCALES[number], WEIGHTS[number]))
        headers = {**bearer(server.token), "Content-Type": kind}
        status, answer = request(server, "POST", f"/api/models/{MODEL}/versions/", body, headers)
        assert status == 201, answer
    policy = json.dumps({"version_policy": "specific", "specific_versions": [1]}).encode()
    headers = {**bearer(server.token), "Content-Type": "application/json"}
    status, answer = request(server, "PATCH", f"/api/models/{MODEL}/", policy, headers)
    assert status == 200 and answer["default_version"] == 1, answer


def _answers(version: int, x: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "y": np.maximum(x * np.float32(SCALES[version]), np.float32(0)),
        "scores": x @ np.asarray(WEIGHTS[version], np.float32),
    }


def _expected() -> dict[str, dict]:
    out = {}
    for name in ("y", "scores"):
        pairs = [(_answers(1, x)[name], _answers(2, x)[name]) for x in INPUTS]
        diffs = np.concatenate([np.abs(a.astype(np.float64) - b).ravel() for a, b in pairs])
        agree = np.concatenate([a.argmax(axis=1) == b.argmax(axis=1) for a, b in pairs])
        out[name] = {
            "exact": sum(a.tobytes() == b.tobytes() for a, b in pairs), "max": diffs.max(), "mean": diffs.mean(),
            "agree": agree.mean(), "rows": agree.size,
        }  # fmt: skip
    return out


def _share(value: float) -> str:
    return f"{100 * value:.1f}%"


def test_the_shadow_comparison_is_shown_on_the_version_page(page, ui_server, shots):
    _arrange(ui_server)
    page.goto(f"/models/{MODEL}/")
    page.select_option("#shadow-form select[name=version]", "2")
    page.fill("#shadow-form input[name=percent]", "100")
    page.click("#shadow-set")
    expect(page.locator("#shadow-now")).to_contain_text("Version 2 gets a copy of 100.0% of the requests")
    for x in INPUTS:
        status, answer = infer_json(ui_server, ui_server.token, MODEL, x)
        assert status == 200 and answer["model_version"] == "1", answer
    want = _expected()
    assert 0 < want["y"]["exact"] < len(INPUTS) and 0 < want["scores"]["agree"] < 1

    page.goto(f"/models/{MODEL}/versions/2/")
    expect(page.locator("#shadow-note")).to_contain_text("gets a copy of 100.0% of the requests")

    def shown() -> bool:  # each process writes its comparisons every CHART_FLUSH_SECONDS (1 s here)
        page.evaluate("window.shadowComparison.load('hour')")
        expect(page.locator("#shadow")).to_have_attribute("data-loaded-range", "hour")
        rows = page.locator("#shadow-table tbody tr[data-output]")
        return rows.count() == 2 and all(
            rows.nth(i).locator("td").nth(1).inner_text() == str(len(INPUTS)) for i in range(2)
        )

    assert wait_for(shown, timeout=30, interval=0.5), page.locator("#shadow-table").inner_text()
    n = len(INPUTS)
    for name, expected in want.items():
        cells = page.locator(f'#shadow-table tr[data-output="{name}"] td').all_inner_texts()
        assert cells[0] == name and cells[1] == str(n)
        assert cells[2] == f"{expected['exact']} ({_share(expected['exact'] / n)})"
        assert float(cells[3]) == pytest.approx(expected["max"], rel=1e-5)
        assert float(cells[4]) == pytest.approx(expected["mean"], rel=1e-5)
        assert cells[5] == f"{_share(expected['agree'])} of {expected['rows']} rows"
    drawn = page.evaluate(
        """() => Object.fromEntries(Chart.getChart(document.getElementById('shadow-chart')).data.datasets
                .map((d) => [d.label, d.data.filter((v) => v !== null)]))"""
    )
    if len(drawn["y: exact-match share"]) == 1:  # one step: the minute of the load (unless it straddled two)
        assert drawn["y: exact-match share"] == [want["y"]["exact"] / n]
        assert drawn["scores: argmax agreement"] == [pytest.approx(want["scores"]["agree"])]
    assert 1 <= len(drawn["y: exact-match share"]) <= 2 and set(drawn) == {
        "y: exact-match share", "y: argmax agreement", "scores: exact-match share", "scores: argmax agreement",
    }  # fmt: skip
    expect(page.locator("#shadow-totals")).to_contain_text(f"{n} copies run, 0 errors, 0 dropped")
    shots.take(page.locator("#shadow"), "shadow-comparison", doc=True)
    assert csp_violations(page) == []

    page.goto(f"/models/{MODEL}/")
    asked = confirming(page, lambda: page.click("#shadow-stop"))
    assert asked == ["Stop shadow traffic to version 2? Its comparison stops growing."]
    expect(page.locator("#shadow-form")).to_be_visible()
    assert page.locator("#shadow-now").count() == 0
