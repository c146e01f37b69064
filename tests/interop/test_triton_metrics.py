"""Triton's metrics (``nv_*``, docs/metrics.md) at the metrics port and at
``/metrics`` on the HTTP port, after a known load sent with tritonclient over
HTTP and gRPC: exact counts for a single model and for an ensemble and its
composing models, durations that agree with the statistics extension, our
``modelhost_*`` request counter counting the composing models too; Triton's
published Grafana dashboards' queries find series."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models
from tests.support.server import LiveServer

pytestmark = pytest.mark.interop

REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
COUNTERS = (
    "nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count",
    "nv_inference_request_duration_us", "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us",
)  # fmt: skip


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(url: str) -> dict[tuple, float]:
    """{(sample name as written, sorted label pairs): value} of a Prometheus
    exposition at ``url`` (read line by line: a parser would rename Triton's
    counters, which have no ``_total``)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            name, labels, number = match.groups()
            samples[(name, tuple(sorted(LABEL.findall(labels or ""))))] = float(number)
    return samples


def metrics_port(server) -> dict[tuple, float]:
    return scrape(f"http://127.0.0.1:{server.metrics_port}/metrics")


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def triton_counts(samples: dict, model: str) -> dict[str, int]:
    """A model version 1's Triton counters, failures by reason."""
    counts = {name: int(value(samples, name, model=model, version="1")) for name in COUNTERS}
    for reason in REASONS:
        counts[reason] = int(value(samples, "nv_inference_request_failure", model=model, reason=reason, version="1"))
    return counts


def delta(after: dict, before: dict) -> dict:
    return {key: after[key] - before[key] for key in after}


def infer(module, client, model: str, name: str, x: np.ndarray, **options):
    inp = module.InferInput(name, list(x.shape), "FP32" if x.dtype == np.float32 else "FP64")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp], **options)


def clients(server):
    return (
        (httpclient, httpclient.InferenceServerClient(server.http_url)),
        (grpcclient, grpcclient.InferenceServerClient(server.grpc_url)),
    )


def test_a_known_load_shows_in_tritons_metrics_exactly(model_server):
    """metrics_probe (max_batch_size 8, no dynamic batching): batches 1, 3, 8, 2
    over both transports are 4 successes, 14 inferences, 4 executions; a
    datatype mismatch over each transport 2 failures (OTHER); a request whose
    1 µs timeout passes before it runs 1 failure REJECTED. The durations are
    the statistics extension's nanoseconds // 1000, and the pending gauge is
    back at 0."""
    (http_module, http), (grpc_module, grpc) = clients(model_server)
    before = triton_counts(metrics_port(model_server), "metrics_probe")
    for i, batch in enumerate((1, 3, 8, 2)):
        module, client = ((http_module, http), (grpc_module, grpc))[i % 2]
        x = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        np.testing.assert_allclose(infer(module, client, "metrics_probe", "x", x).as_numpy("y"), 3.0 * x + 1.0)
    for module, client in ((http_module, http), (grpc_module, grpc)):
        with pytest.raises(InferenceServerException, match="FP64"):
            infer(module, client, "metrics_probe", "x", np.ones((1, 4), dtype=np.float64))
    with pytest.raises(InferenceServerException, match="deadline"):
        infer(grpc_module, grpc, "metrics_probe", "x", np.ones((1, 4), dtype=np.float32), timeout=1)
    samples = metrics_port(model_server)
    after = triton_counts(samples, "metrics_probe")
    moved = delta(after, before)
    assert {k: moved[k] for k in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count")} == {
        "nv_inference_request_success": 4, "nv_inference_count": 14, "nv_inference_exec_count": 4,
    }  # fmt: skip
    assert {reason: moved[reason] for reason in REASONS} == {"REJECTED": 1, "CANCELED": 0, "BACKEND": 0, "OTHER": 2}
    (stats,) = http.get_inference_statistics("metrics_probe", "1")["model_stats"]
    inference = stats["inference_stats"]
    assert after["nv_inference_request_success"] == int(inference["success"]["count"])
    assert sum(after[reason] for reason in REASONS) == int(inference["fail"]["count"])
    assert after["nv_inference_count"] == int(stats["inference_count"])
    assert after["nv_inference_exec_count"] == int(stats["execution_count"])
    for stage, name in (
        ("success", "nv_inference_request_duration_us"), ("queue", "nv_inference_queue_duration_us"),
        ("compute_input", "nv_inference_compute_input_duration_us"),
        ("compute_infer", "nv_inference_compute_infer_duration_us"),
        ("compute_output", "nv_inference_compute_output_duration_us"),
    ):  # fmt: skip
        assert after[name] == int(inference[stage]["ns"]) // 1000, name
    assert after["nv_inference_compute_infer_duration_us"] > 0
    assert value(samples, "nv_inference_pending_request_count", model="metrics_probe", version="1") == 0
    http.close()
    grpc.close()


def test_an_ensemble_and_its_composing_models_are_counted(model_server):
    """ens_metrics (a -> b): 3 requests over both transports count 3 successes
    for the ensemble and for each composing model, in Triton's metrics and in
    modelhost_inference_requests_total (under the ensemble request's
    protocol); a request refused before any step is the ensemble's failure only."""
    (http_module, http), (grpc_module, grpc) = clients(model_server)
    names = ("ens_metrics", "ens_metrics_a", "ens_metrics_b")
    ours = "modelhost_inference_requests_total"

    def read():
        samples = metrics_port(model_server)
        counts = {name: triton_counts(samples, name) for name in names}
        for name in names:
            for protocol in ("rest", "grpc"):
                counts[name][protocol] = int(value(samples, ours, model=name, outcome="success", protocol=protocol,
                                                   version="1"))  # fmt: skip
        return counts

    before = read()
    for i, batch in enumerate((2, 1, 3)):
        module, client = ((http_module, http), (grpc_module, grpc))[i % 2]
        x = np.full((batch, 4), float(i), dtype=np.float32)
        np.testing.assert_allclose(infer(module, client, "ens_metrics", "X", x).as_numpy("Y"), (x + 1.0) * 2.0)
    with pytest.raises(InferenceServerException):  # refused before any step: the ensemble's failure
        infer(http_module, http, "ens_metrics", "X", np.ones((1, 3), dtype=np.float32))
    after = read()
    moved = {name: delta(after[name], before[name]) for name in names}
    for name in names:
        counted = {k: moved[name][k] for k in ("nv_inference_request_success", "nv_inference_count", "rest", "grpc")}
        # max_batch_size 0: a request is one inference whatever its first dimension (Triton)
        assert counted == {"nv_inference_request_success": 3, "nv_inference_count": 3, "rest": 2, "grpc": 1}, name
        assert moved[name]["OTHER"] == (1 if name == "ens_metrics" else 0), name
        (stats,) = http.get_inference_statistics(name, "1")["model_stats"]
        assert after[name]["nv_inference_request_success"] == int(stats["inference_stats"]["success"]["count"])
        assert after[name]["nv_inference_request_duration_us"] == int(stats["inference_stats"]["success"]["ns"]) // 1000
    http.close()
    grpc.close()


def test_the_metrics_port_and_the_http_port_say_the_same(model_server):
    """The same families and series at both (values may move between the two scrapes only for other traffic)."""
    port = metrics_port(model_server)
    http = scrape(f"http://{model_server.http_url}/metrics")
    nv = {key for key in port if key[0].startswith("nv_")}
    assert nv and nv == {key for key in http if key[0].startswith("nv_")}
    assert {key for key in port if key[0] == "nv_inference_request_success"} >= {
        ("nv_inference_request_success", (("model", "iris"), ("version", "1")))
    }  # a served version has its series (0) before its first request, as in Triton
    missing = urllib.request.Request(f"http://127.0.0.1:{model_server.metrics_port}/v2/health/ready")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(missing, timeout=10)
    assert info.value.code == 404


def test_a_grpc_sequence_error_is_labelled_with_its_version_as_rest_does(model_server):
    (http_module, http), (grpc_module, grpc) = clients(model_server)
    labels = {"model": "simple_sequence", "outcome": "invalid_argument", "version": "1"}
    before = metrics_port(model_server)
    for module, client in ((http_module, http), (grpc_module, grpc)):
        inp = module.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(np.ones((1, 1), dtype=np.int32))
        with pytest.raises(InferenceServerException, match="must specify the START flag"):
            client.infer("simple_sequence", [inp], sequence_id=987654, sequence_start=False)
    after = metrics_port(model_server)
    for protocol in ("rest", "grpc"):
        name = "modelhost_inference_requests_total"
        assert value(after, name, protocol=protocol, **labels) - value(before, name, protocol=protocol, **labels) == 1
    http.close()
    grpc.close()


#: The queries of Triton's published Grafana dashboards (triton-inference-server/server deploy/k8s-onprem and
#: deploy/aws dashboard.json) over the inference metrics of Triton 2.5x.
TRITON_DASHBOARD_QUERIES = (
    "avg(rate(nv_inference_queue_duration_us[30s])/(1+rate(nv_inference_request_success[30s]))) by (pod)",
    "count(count(nv_inference_count) by (instance))",
    "sum by (pod) (rate(nv_inference_count[1m])) / ignoring(pod) group_left sum (rate(nv_inference_count[1m]))",
    "sum(nv_inference_request_failure) by (pod)",
    "sum(nv_inference_request_success) by (pod)",
    "sum(rate(nv_inference_compute_infer_duration_us[30s])) by (model) / 1000",
    "nv_inference_request_failure",
    "nv_inference_request_success",
    "rate(nv_inference_queue_duration_us[30s]) / 1000",
    "nv_cpu_memory_used_bytes",
    "nv_cpu_utilization * 100",
)
#: Their queries that stay empty here: Triton's GPU metrics (DCGM).
TRITON_GPU_QUERIES = ("nv_gpu_memory_used_bytes", "nv_gpu_power_usage", "nv_gpu_utilization * 100")
#: Labels the scrape adds (Prometheus' ``instance``, Kubernetes' ``pod``), not the server.
SCRAPE_LABELS = {"instance", "pod"}


def test_tritons_dashboard_queries_find_series(model_server):
    """Every metric Triton's dashboards query has series at the metrics port after
    traffic, with the labels their queries group by (but those the scrape adds)."""
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        infer(httpclient, client, "metrics_probe", "x", np.ones((1, 4), dtype=np.float32))
    samples = metrics_port(model_server)
    assert not any(sample.startswith("nv_gpu_") for sample, _ in samples)  # documented as not exported
    for query in TRITON_DASHBOARD_QUERIES:
        grouped = set(re.findall(r"\w+", " ".join(re.findall(r"(?:by|ignoring)\s*\(([^)]*)\)", query))))
        for name in set(re.findall(r"\bnv_[a-z_]+", query)):
            series = [dict(labels) for (sample, labels) in samples if sample == name]
            assert series, f"{query}: no series of {name}"
            assert any(grouped - SCRAPE_LABELS <= set(labels) for labels in series), query
            if "rate(" in query:  # a counter that moved
                assert any(samples[(name, tuple(sorted(s.items())))] > 0 for s in series), query


def test_allow_metrics_false_turns_both_off(tmp_path):
    """``serve --allow-metrics false``: no metrics port, 404 at /metrics (Triton serves none)."""
    repository = tmp_path / "repository"
    onnx_models.write_model(repository, "m", onnx_models.affine(1.0, 0.0))
    server = LiveServer(repository, tmp_path / "var", workers=1, args=("--allow-metrics=false",))
    server.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://{server.http_url}/metrics", timeout=10)
        assert info.value.code == 404
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10)
    finally:
        server.stop()


def test_requests_waiting_for_a_seat_are_pending(model_server):
    """Eight concurrent requests of about 0.5 s to ``slow`` (one instance: one seat per server process):
    while the first run, the others wait, and nv_inference_pending_request_count says so; 0 after."""
    import threading

    from tests.support.live import wait_for

    def one():
        with httpclient.InferenceServerClient(model_server.http_url, connection_timeout=120, network_timeout=120) as c:
            x = httpclient.InferInput("x", [1, 256], "FP32")
            x.set_data_from_numpy(np.full((1, 256), 0.5, dtype=np.float32))
            n = httpclient.InferInput("n", [], "INT64")
            n.set_data_from_numpy(np.array(25_000, dtype=np.int64))
            c.infer("slow", [x, n])

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    seen = []

    def pending() -> bool:
        seen.append(value(metrics_port(model_server), "nv_inference_pending_request_count", model="slow", version="1"))
        return seen[-1] > 0

    try:
        wait_for(pending, timeout=30)
    finally:
        for thread in threads:
            thread.join()
    assert max(seen) >= 1
    assert value(metrics_port(model_server), "nv_inference_pending_request_count", model="slow", version="1") == 0
