"""The web UI in a real headless Chromium against a live ``serve``: sign in,
upload the iris classifier by drag and drop, watch it become READY, run
"try it" and check the answer against values computed independently, then
labels, version policy, refused uploads, upload progress, API tokens, docs."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from playwright.sync_api import expect

from tests.support import onnx_models as m
from tests.support.browser import confirming, csp_violations, new_page
from tests.support.live import bearer, multipart, request

pytestmark = [pytest.mark.browser, pytest.mark.interop]

IRIS_ROWS = [0, 145, 60]  # setosa, virginica, versicolor samples of the bundled dataset


@pytest.fixture(scope="module")
def iris_onnx() -> bytes:
    from models_store.management.commands.build_demo_repository import build_models

    return build_models()["iris"][0]


def _api_upload(server, model: str, payload: bytes) -> dict:
    """Arrange: upload through the management API (alice's token)."""
    body, kind = multipart({"team": "ml"}, payload)
    status, answer = request(
        server, "POST", f"/api/models/{model}/versions/", body, {**bearer(server.token), "Content-Type": kind}
    )
    assert status == 201, answer
    return answer


def _drop_file(page, selector: str, name: str, payload: bytes) -> None:
    """Drag and drop a file onto ``selector``, as a person dragging it from their desktop."""
    page.evaluate(
        """([selector, name, data]) => {
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name, { type: "application/octet-stream" }));
            const zone = document.querySelector(selector);
            zone.dispatchEvent(new DragEvent("dragenter", { dataTransfer: transfer, bubbles: true }));
            zone.dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true }));
        }""",
        [selector, name, base64.b64encode(payload).decode()],
    )


def _expected_iris(rows):
    """Labels from the dataset itself; probabilities from a scikit-learn model
    trained here the way the demo trains it (no ONNX involved)."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    data = load_iris()
    features = data.data.astype(np.float32)
    estimator = LogisticRegression(max_iter=1000).fit(features, data.target)
    return features[rows], data.target[rows], estimator.predict_proba(features[rows])


def test_sign_in_and_out(browser, ui_server, shots):
    page = new_page(browser, ui_server)
    try:
        page.goto("/models/")
        expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/models/"))
        shots.take(page, "login")
        user, password = ui_server.credentials
        page.fill("#id_username", user)
        page.fill("#id_password", "not the password")
        page.click("button[type=submit]")
        expect(page.locator(".error")).to_contain_text("did not match")
        page.fill("#id_username", user)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        expect(page).to_have_url(re.compile(r"/models/$"))
        expect(page.locator('tr[data-model="digits"]')).to_contain_text("operators")
        expect(page.locator('tr[data-model="digits"]')).to_contain_text("v1 READY")
        page.click("header.top form button")
        expect(page).to_have_url(re.compile(r"/accounts/login/$"))
        page.goto("/tokens/")
        expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/tokens/"))
        assert page.errors.unexpected() == []
    finally:
        page.context.close()


def test_upload_iris_watch_it_validate_and_try_it(page, ui_server, iris_onnx, shots):
    """The issue's scenario: upload the iris model, watch it validate, call it
    from the page; then its snippets, a label, a refused version policy."""
    page.goto("/upload/")
    page.fill("#id_name", "iris")
    page.select_option("#id_team", "ml")
    page.fill("#id_description", "LogisticRegression on the iris dataset (4 features, 3 classes)")
    _drop_file(page, "#dropzone", "iris.onnx", iris_onnx)
    expect(page.locator("#file-info")).to_contain_text("iris.onnx")
    shots.take(page, "upload", doc=True)
    page.click("#upload-submit")
    expect(page).to_have_url(re.compile(r"/models/iris/versions/1/$"))
    expect(page.locator("#version-state [data-state]")).to_have_attribute("data-state", "READY")
    expect(page.locator("#uploaded-by")).to_have_text("alice")
    expect(page.locator("#validation-log")).to_contain_text("warm-up inference on zero inputs")
    expect(page.locator("#signature")).to_contain_text("probabilities")

    features, labels, probabilities = _expected_iris(IRIS_ROWS)
    rows = features.astype(np.float64).round(4).tolist()  # the dataset's decimals, as a person types them
    request = {"inputs": [{"name": "input", "shape": [3, 4], "datatype": "FP32", "data": rows}]}
    expect(page.locator("#tryit-result")).to_be_hidden()  # no empty "Request sent" / "Answer" boxes before a send
    page.fill("#tryit-body", json.dumps(request))
    page.click("#tryit-send")
    answer_box = page.locator("#tryit-response")
    expect(answer_box).to_have_attribute("data-status", "200")
    expect(page.locator("#tryit-result")).to_be_visible()
    answer = json.loads(answer_box.inner_text())
    outputs = {o["name"]: o for o in answer["outputs"]}
    assert (answer["model_name"], answer["model_version"]) == ("iris", "1")
    assert outputs["label"]["data"] == labels.tolist() == [0, 2, 1]
    assert outputs["probabilities"]["shape"] == [3, 3]
    np.testing.assert_allclose(np.reshape(outputs["probabilities"]["data"], (3, 3)), probabilities, atol=1e-4)
    expect(page.locator("#tryit-request")).to_contain_text("POST /v2/models/iris/versions/1/infer")
    expect(page.locator("#tryit-status")).to_contain_text("200 OK")
    shots.take(page, "version", full_page=True)
    page.locator("#tryit").scroll_into_view_if_needed()
    shots.take(page.locator("#tryit"), "try-it", doc=True)

    page.click('[data-tab="tritonclient-grpc"]')
    grpc_snippet = page.locator("#snippet-tritonclient-grpc")
    expect(grpc_snippet).to_be_visible()
    expect(page.locator("#snippet-curl-v2")).to_be_hidden()
    text = grpc_snippet.inner_text()
    assert 'grpcclient.InferInput("input", [1, 4], "FP32")' in text
    assert 'client.infer("iris", inputs, model_version="1")' in text
    assert 'print(result.as_numpy("probabilities"))' in text
    page.click('[data-tab="curl-tfserving"]')
    expect(page.locator("#snippet-curl-tfserving")).to_contain_text("/v1/models/iris/versions/1:predict")
    page.locator(".snippets").scroll_into_view_if_needed()
    shots.take(page.locator(".snippets"), "snippets", doc=True)

    page.goto("/models/iris/")
    page.fill("#id_label", "stable")
    page.select_option("#id_version", "1")
    page.click("#label-form button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("Label stable -> version 1")
    expect(page.locator("#versions tr[data-version='1']")).to_contain_text("stable")
    page.select_option("#id_version_policy", "specific")
    page.fill("#id_specific_versions", "5")
    page.click("#settings-form button[type=submit]")
    expect(page.locator("#page-error")).to_contain_text("model 'iris' has no version 5")
    expect(page.locator("#policy")).to_contain_text("Latest N: 1")  # unchanged
    expect(page.locator("#audit")).to_contain_text("label.set")
    expect(page.locator("#audit")).to_contain_text("version.upload")
    page.goto("/models/iris/")
    shots.take(page, "model", full_page=True, doc=True)

    page.goto("/models/")
    iris = page.locator('tr[data-model="iris"]')
    expect(iris).to_contain_text("ml")
    expect(iris).to_contain_text("v1 READY")
    expect(iris).to_contain_text("stable")
    shots.take(page, "model-list", doc=True)


def test_refused_uploads_say_why(page, ui_server):
    payload = m.affine(2.0, 1.0)
    _api_upload(ui_server, "dup", payload)
    page.goto("/models/dup/upload/")
    _drop_file(page, "#dropzone", "same.onnx", payload)
    page.click("#upload-submit")
    expect(page.locator("#upload-error")).to_contain_text("model 'dup' already has these bytes")
    _drop_file(page, "#dropzone", "notes.txt", b"these are not the weights you are looking for")
    page.click("#upload-submit")
    expect(page.locator("#upload-error")).to_contain_text("not an ONNX model")
    expect(page).to_have_url(re.compile(r"/models/dup/upload/$"))
    status, model = request(ui_server, "GET", "/api/models/dup/", headers=bearer(ui_server.token))
    assert status == 200 and [v["number"] for v in model["versions"]] == [1]


def test_a_model_with_external_data_uploads_from_the_page(page, ui_server):
    """The model file dropped, its data file chosen in the data-files field:
    one upload, READY, and the page's "try it" answers x + w."""
    w = np.array([0.25, -4.0, 1.5, 100.0], np.float32)
    page.goto("/upload/")
    page.fill("#id_name", "with_data")
    page.select_option("#id_team", "ml")
    _drop_file(page, "#dropzone", "model.onnx", m.external_data_sum({"w.bin": w}))
    page.set_input_files(
        "#id_data", files=[{"name": "w.bin", "mimeType": "application/octet-stream", "buffer": w.tobytes()}]
    )
    expect(page.locator("#file-info")).to_contain_text("+ 1 data file(s)")
    page.click("#upload-submit")
    expect(page).to_have_url(re.compile(r"/models/with_data/versions/1/$"))
    expect(page.locator("#version-state [data-state]")).to_have_attribute("data-state", "READY")
    x = [1.0, 2.0, 3.0, 4.0]
    page.fill("#tryit-body", json.dumps({"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": x}]}))
    page.click("#tryit-send")
    answer_box = page.locator("#tryit-response")
    expect(answer_box).to_have_attribute("data-status", "200")
    got = json.loads(answer_box.inner_text())["outputs"][0]["data"]
    np.testing.assert_array_equal(np.array(got, np.float32), np.array(x, np.float32) + w)


def test_an_ensemble_uploads_from_the_page_as_its_config_alone(page, ui_server):
    """No file, the ensemble's config.pbtxt pasted: READY, its steps listed,
    and the page's "try it" answers what the two steps chained give."""
    from tests.support.repository import _ensemble

    _api_upload(ui_server, "ui_double", m.affine(2.0, 1.0))
    _api_upload(ui_server, "ui_shift", m.affine(1.0, -3.0))
    page.goto("/upload/")
    page.fill("#id_name", "ui_chain")
    page.select_option("#id_team", "ml")
    page.click("#upload-submit")  # neither a file nor an ensemble's config: said at once
    expect(page.locator("#upload-error")).to_contain_text("Choose a model file (or, for an ensemble")
    page.fill(
        "#id_config",
        _ensemble(
            "ui_chain",
            '{ name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
            '{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
            [("ui_double", -1, {"x": "X"}, {"y": "t"}), ("ui_shift", -1, {"x": "t"}, {"y": "Y"})],
        ),
    )
    page.click("#upload-submit")
    expect(page).to_have_url(re.compile(r"/models/ui_chain/versions/1/$"))
    expect(page.locator("#version-state [data-state]")).to_have_attribute("data-state", "READY")
    expect(page.locator("#ensemble-steps")).to_contain_text("ui_shift")
    x = [[1.0, 2.0, 3.0, 4.0]]
    page.fill("#tryit-body", json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": x}]}))
    page.click("#tryit-send")
    answer_box = page.locator("#tryit-response")
    expect(answer_box).to_have_attribute("data-status", "200")
    got = json.loads(answer_box.inner_text())["outputs"][0]["data"]
    np.testing.assert_array_equal(np.array(got, np.float32), (np.array(x, np.float32) * 2 + 1 - 3).ravel())


def _big_model(megabytes: int) -> bytes:
    """y = x + w with a ``megabytes`` MB FP32 weight (a real, servable model)."""
    count = megabytes * 1024 * 1024 // 4
    weight = numpy_helper.from_array(np.full(count, 0.5, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_large_upload_shows_real_progress(page, tmp_path, shots):
    payload = _big_model(12)
    path = tmp_path / "big.onnx"
    path.write_bytes(payload)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(  # about 3 s for 12 MB, so that progress events come in between
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 4 * 1024 * 1024},
    )
    try:
        page.goto("/upload/")
        page.evaluate(
            """() => {
                window.progressSeen = [];
                const send = XMLHttpRequest.prototype.send;
                XMLHttpRequest.prototype.send = function (body) {
                    this.upload.addEventListener("progress", (e) => window.progressSeen.push([e.loaded, e.total]));
                    return send.call(this, body);
                };
            }"""
        )
        page.fill("#id_name", "big")
        page.select_option("#id_team", "ml")
        page.set_input_files("#id_file", str(path))
        page.click("#upload-submit")
        bar = page.locator("#progress-bar")
        page.wait_for_function(
            "() => { const v = document.getElementById('progress-bar').value; return v > 10 && v < 90; }"
        )
        shots.take(page, "upload-progress", doc=True)
        midway = bar.evaluate("b => b.value")
        seen = page.evaluate("window.progressSeen")
        assert 0 < midway < 100
        assert len(seen) >= 2 and all(total >= len(payload) for _, total in seen)
        assert seen == sorted(seen)
        expect(page).to_have_url(re.compile(r"/models/big/versions/1/$"), timeout=60_000)
    finally:
        unthrottled = {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        cdp.send("Network.emulateNetworkConditions", unthrottled)
    expect(page.locator("#version-state [data-state]")).to_have_attribute("data-state", "READY")
    expect(page.locator("dl.facts")).to_contain_text(f"({len(payload)} bytes)")


def test_api_tokens_are_shown_once(page, ui_server, shots):
    page.goto("/tokens/")
    page.fill("#id_name", "nightly-eval")
    page.select_option("#token-form #id_team", "ml")
    page.click("#token-form button[type=submit]")
    token = page.locator("#token-value").inner_text().strip()
    assert re.fullmatch(r"mh_[A-Za-z0-9_\-]{43}", token)
    expect(page.locator("#tokens")).to_contain_text(token[:10])
    shots.take(page, "tokens", doc=True)
    status, models = request(ui_server, "GET", "/api/models/", headers=bearer(token))
    assert status == 200 and "digits" in [model["name"] for model in models["results"]]
    page.reload()  # a GET after post/redirect/get: no second token, and the token is not shown again
    expect(page.locator("#token-value")).to_have_count(0)
    expect(page.locator('tr[data-token="nightly-eval"]')).to_have_count(1)
    asked = confirming(page, page.locator('tr[data-token="nightly-eval"] button').click)
    assert asked == ["Revoke token nightly-eval? Callers using it get 401 at once."]
    expect(page.locator(".messages")).to_contain_text("Revoked the API token nightly-eval")
    assert request(ui_server, "GET", "/api/models/", headers=bearer(token))[0] == 401


def test_api_docs(page, shots):
    page.goto("/api/docs/")
    expect(page.locator(".swagger-ui .info")).to_contain_text("modelhost management API")
    expect(page.locator(".swagger-ui")).to_contain_text("/api/models/{name}/versions/")
    shots.take(page, "api-docs")
    assert csp_violations(page) == []  # its script served apart, its style a file: nothing inline


def test_the_models_list_filters_and_sorts(page, ui_server):
    """The models list's filter form and sortable headers, as a person uses them."""
    for name in ("filter-a", "filter-b"):
        _api_upload(ui_server, name, m.affine(1.0, 0.0))
    page.goto("/models/")
    page.fill("#model-filter input[name=q]", "filter-")
    page.click("#model-filter button[type=submit]")
    rows = page.locator("#model-list tbody tr[data-model]")
    expect(rows).to_have_count(2)
    assert [rows.nth(i).get_attribute("data-model") for i in range(2)] == ["filter-a", "filter-b"]
    expect(page.locator("#model-count")).to_have_text("2 models")
    page.click('a.sort[data-sort="name"]')  # ascending now: the header sorts descending, keeping the filter
    expect(rows.first).to_have_attribute("data-model", "filter-b")
    assert "q=filter-" in page.url and "order=-name" in page.url
    page.select_option("#model-filter select[name=team]", "-")  # operator-owned: digits only, not ours
    page.fill("#model-filter input[name=q]", "")
    page.click("#model-filter button[type=submit]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-model", "digits")
