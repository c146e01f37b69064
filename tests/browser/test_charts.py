"""The model page's charts and the models list's sparklines in Chromium,
after a scripted load with known numbers of successes and errors per version
and transport (REST JSON and gRPC through tritonclient): the counts the
charts draw (read from the Chart.js objects) are those sent, in the step of
the minute they were sent, for each range (hour, day, week)."""

from __future__ import annotations

import json
import secrets
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from playwright.sync_api import expect
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.browser import csp_violations, new_page, sign_in
from tests.support.live import bearer, infer_json, manage, multipart, request, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.interop]

MODEL = "charted"
#: (version, transport) -> (successes, errors) sent
LOAD = {(1, "rest"): (6, 3), (2, "rest"): (4, 1), (2, "grpc"): (5, 2)}


def _arrange(server) -> None:
    """Two versions of an affine model (team ml), both served."""
    for scale in (2.0, 3.0):
        body, kind = multipart({"team": "ml"}, m.affine(scale, 1.0))
        status, answer = request(
            server, "POST", f"/api/models/{MODEL}/versions/", body, {**bearer(server.token), "Content-Type": kind}
        )
        assert status == 201, answer
    status, answer = request(
        server, "PATCH", f"/api/models/{MODEL}/", json.dumps({"version_policy": "all"}).encode(),
        {**bearer(server.token), "Content-Type": "application/json"},
    )  # fmt: skip
    assert status == 200, answer

    def ready(version: int) -> bool:  # the readiness route counts no inference
        return request(server, "GET", f"/v2/models/{MODEL}/versions/{version}/ready")[0] == 200

    assert wait_for(lambda: ready(1) and ready(2), timeout=90)


def _send_load(server) -> None:
    good, bad = np.ones((1, 4), np.float32), np.ones((1, 5), np.float32)  # width 5: InvalidInput
    for (version, transport), (successes, errors) in LOAD.items():
        if transport == "rest":
            for x, n, want in ((good, successes, 200), (bad, errors, 400)):
                for _ in range(n):
                    status, answer = infer_json(server, server.token, MODEL, x, str(version))
                    assert status == want, answer
            continue
        client = grpcclient.InferenceServerClient(server.grpc_url)
        headers = {"authorization": f"Bearer {server.token}"}
        for x, n, fails in ((good, successes, False), (bad, errors, True)):
            for _ in range(n):
                tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                try:
                    client.infer(MODEL, [tensor], model_version=str(version), headers=headers)
                    assert not fails
                except InferenceServerException as exc:
                    assert fails and "INVALID_ARGUMENT" in str(exc.status()), exc
        client.close()


def _drawn(page, canvas: str) -> dict[str, list]:
    """{dataset label: values} of the Chart.js chart on ``canvas``."""
    return page.evaluate(
        """(id) => Object.fromEntries(Chart.getChart(document.getElementById(id)).data.datasets
                .map((d) => [d.label, d.data]))""",
        canvas,
    )


def _counts(page, canvas: str) -> dict[str, int]:
    """Per series: the requests the chart draws (its rates times the step's seconds)."""
    step = page.evaluate("window.modelCharts.data.step_seconds")
    return {name: round(sum(v or 0 for v in values) * step) for name, values in _drawn(page, canvas).items()}


def _busy_times(page, canvas: str) -> set[int]:
    """The start times (s) of the steps in which ``canvas`` draws something."""
    times = page.evaluate("window.modelCharts.data.times")
    return {times[i] for values in _drawn(page, canvas).values() for i, v in enumerate(values) if v}


def _labels(page, canvas: str) -> list[str]:
    """The x axis labels of the Chart.js chart on ``canvas``."""
    return page.evaluate("(id) => Chart.getChart(document.getElementById(id)).data.labels", canvas)


def _load_range(page, name: str) -> None:
    page.click(f'#chart-range [data-range="{name}"]')
    expect(page.locator("#charts")).to_have_attribute("data-loaded-range", name)


def test_charts_show_the_load_per_version_and_transport(page, ui_server, shots):
    _arrange(ui_server)
    began = time.time()
    _send_load(ui_server)
    ended = time.time()
    want_requests = {f"v{v} {t}": ok + bad for (v, t), (ok, bad) in LOAD.items()}
    want_errors = {f"v{v} {t}": bad for (v, t), (_, bad) in LOAD.items()}

    answer = page.goto(f"/models/{MODEL}/")
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]

    def flushed() -> bool:  # each serving process writes its minutes every CHART_FLUSH_SECONDS (1 s here)
        page.evaluate("window.modelCharts.load('hour')")
        expect(page.locator("#charts")).to_have_attribute("data-loaded-range", "hour")
        return _counts(page, "chart-requests") == want_requests and _counts(page, "chart-errors") == want_errors

    assert wait_for(flushed, timeout=30, interval=0.5), (_counts(page, "chart-requests"), want_requests)
    assert page.evaluate("window.modelCharts.data.step_seconds") == 60
    assert len(page.evaluate("window.modelCharts.data.times")) == 60
    # in the step(s) of the minute(s) the load was sent
    sent_in = {int(t) // 60 * 60 for t in (began, ended)}
    assert _busy_times(page, "chart-requests") <= sent_in and _busy_times(page, "chart-errors") <= sent_in
    expect(page.locator("#chart-totals")).to_contain_text("21 requests, 6 errors in the last hour")
    # the time axis in 24-hour time, as the rest of the UI (the browser's en-US locale alone would say "02:05 PM")
    zone = ZoneInfo(page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone"))
    times = page.evaluate("window.modelCharts.data.times")
    assert _labels(page, "chart-requests") == [datetime.fromtimestamp(t, zone).strftime("%H:%M") for t in times]

    # latency and batch sizes of one series: every answered request ran alone (batch size 1)
    page.select_option("#chart-series", "v1 rest")
    latency = _drawn(page, "chart-latency")
    assert set(latency) == {f"{k} p{q}" for k in ("queue", "compute") for q in (50, 95, 99)}
    for kind in ("queue", "compute"):
        p50, p95, p99 = (latency[f"{kind} p{q}"] for q in (50, 95, 99))
        busy = [i for i, v in enumerate(p50) if v is not None]
        assert busy and all(0 <= p50[i] <= p95[i] <= p99[i] for i in busy)
    assert all(0 < latency["compute p50"][i] < 1000 for i in busy)  # milliseconds
    (batches,) = _drawn(page, "chart-batches").values()
    assert {v for v in batches if v is not None} == {1.0}
    page.select_option("#chart-series", "all")
    shots.take(page, "model-charts", full_page=True, doc=True)
    assert csp_violations(page) == []  # Chart.js and the page's scripts run under the policy

    # the other ranges: the same counts in coarser steps
    for name, step, steps in (("day", 300, 288), ("week", 3600, 168)):
        _load_range(page, name)
        assert page.evaluate("window.modelCharts.data.step_seconds") == step
        assert len(page.evaluate("window.modelCharts.data.times")) == steps
        assert _counts(page, "chart-requests") == want_requests and _counts(page, "chart-errors") == want_errors
        assert _busy_times(page, "chart-requests") <= {int(t) // step * step for t in (began, ended)}
        expect(page.locator('#chart-range [aria-pressed="true"]')).to_have_text(f"last {name}")
        hours = [
            datetime.fromtimestamp(t, zone).strftime("%H:%M") for t in page.evaluate("window.modelCharts.data.times")
        ]
        assert [label[-5:] for label in _labels(page, "chart-requests")] == hours
    _load_range(page, "hour")
    assert _counts(page, "chart-requests") == want_requests

    # the models list: a sparkline of the model's requests per minute
    page.goto("/models/")
    line = page.evaluate(
        """(name) => Chart.getChart(document.querySelector(`canvas[data-sparkline="${name}"]`)).data.datasets[0].data""",
        MODEL,
    )
    assert len(line) == 60 and sum(line) == 21
    assert csp_violations(page) == []


def test_charts_json_is_team_scoped_and_checks_its_range(page, browser, ui_server):
    page.goto("/models/")
    answer = page.evaluate(
        "fetch('/models/digits/charts.json?range=year').then(async (r) => [r.status, await r.json()])"
    )
    assert answer[0] == 400 and "unknown range 'year'" in answer[1]["error"]
    assert page.evaluate("fetch('/models/no-such-model/charts.json').then((r) => r.status)") == 404
    assert request(ui_server, "GET", "/models/digits/charts.json")[0] in (302, 401, 403)  # not signed in
    # someone of another team sees the charts exactly when they see the model page
    # (every signed-in user, unless INFERENCE_REQUIRE_TOKEN scopes models to their teams)
    password = secrets.token_urlsafe(16)
    manage(
        ui_server,
        "create_user",
        "carol",
        "--team",
        "other",
        "--password-from-env",
        env={"MODELHOST_PASSWORD": password},
    )
    carol = new_page(browser, ui_server)
    try:
        carol.server = ui_server
        ui_server_credentials, ui_server.credentials = ui_server.credentials, ("carol", password)
        try:
            sign_in(carol, ui_server)
        finally:
            ui_server.credentials = ui_server_credentials
        for name in (MODEL, "digits", "no-such-model"):
            page_status = carol.evaluate(f"fetch('/models/{name}/').then((r) => r.status)")
            assert carol.evaluate(f"fetch('/models/{name}/charts.json').then((r) => r.status)") == page_status
    finally:
        carol.context.close()
