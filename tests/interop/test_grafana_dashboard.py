"""The Grafana dashboard in deploy/grafana/: every metric its queries name is
one the server's ``/metrics`` exports (live, after traffic, in process and in
worker mode), so that no panel stays empty because of a renamed metric."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client import REGISTRY

from tests.conftest import EXECUTOR
from tests.support.live import wait_for
from tests.support.server import ROOT

pytestmark = pytest.mark.interop

DASHBOARD = ROOT / "deploy" / "grafana" / "modelhost-dashboard.json"

#: Metrics with no sample until something happens that this test does not
#: cause; for them the test asks that the server declares them (with the
#: same sample name), and says why they may be absent.
CONDITIONAL = {
    "modelhost_throttled_requests_total": "a rate limit refused a request",
    "modelhost_model_evictions_total": "the memory budget unloaded a version",
    "modelhost_model_load_wait_seconds_bucket": "a request waited for a load (the server loads at start-up)",
}
IN_PROCESS_ONLY = {  # in worker mode the workers load the models: their loads are not the front ends'
    "modelhost_model_load_duration_seconds_count",
}
WORKER_ONLY = {  # exported by worker mode's front ends only
    "modelhost_worker_queue_depth",
    "modelhost_worker_pool_depth",
    "modelhost_worker_busy_fraction",
    "modelhost_workers",
}


def dashboard_metrics() -> set[str]:
    """The metric names in the dashboard's queries (not label values or functions)."""
    board = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    exprs += [variable["definition"] for variable in board["templating"]["list"] if "definition" in variable]
    assert len(exprs) >= 12
    names = set()
    for expr in exprs:
        names.update(re.findall(r"\b((?:modelhost|nv)_[a-z_]+)\b", re.sub(r'"[^"]*"', '""', expr)))
    return names


def exported(text: str) -> set[str]:
    """The sample names of a Prometheus exposition."""
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M)}


def declared() -> set[str]:
    """Sample names the server's metric definitions register (importing them here)."""
    import inference.observability.metrics  # noqa: F401 - registers the metrics in REGISTRY

    return set(REGISTRY._names_to_collectors)


def test_every_metric_the_dashboard_queries_is_exported(model_server):
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        inp = httpclient.InferInput("x", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        client.infer("stats_probe", [inp])
    import urllib.request

    def scrape() -> str:
        return urllib.request.urlopen(f"http://{model_server.http_url}/metrics", timeout=10).read().decode()

    names = dashboard_metrics()
    must = names - set(CONDITIONAL) - (WORKER_ONLY if EXECUTOR == "inprocess" else IN_PROCESS_ONLY)
    assert {"modelhost_inference_requests_total", "modelhost_inference_request_duration_seconds_bucket"} <= must
    if EXECUTOR == "workers":
        assert WORKER_ONLY <= must
        wait_for(lambda: must <= exported(scrape()), timeout=10)  # the worker's first heartbeat
    missing = must - exported(scrape())
    assert not missing, f"the dashboard queries metrics /metrics does not export: {sorted(missing)}"
    undeclared = (names & (set(CONDITIONAL) | IN_PROCESS_ONLY)) - declared()
    assert not undeclared, f"the dashboard queries metrics the server does not define: {sorted(undeclared)}"
    assert set(CONDITIONAL) <= names  # a stale entry here would hide nothing, but say so


def _panels() -> list[dict]:
    return json.loads(DASHBOARD.read_text())["panels"]


def _queried(panel: dict) -> set[str]:
    return {name for target in panel["targets"] for name in re.findall(r"\b((?:modelhost|nv)_[a-z_]+)", target["expr"])}


def test_panels_that_may_say_no_data_explain_why():
    """A panel whose every query names a metric that fills in only in worker mode or after a first
    eviction, load wait or throttle says so in its description and in its "no value" text."""
    conditional = set(CONDITIONAL) | WORKER_ONLY | IN_PROCESS_ONLY
    quiet = [panel for panel in _panels() if _queried(panel) & conditional]
    assert len(quiet) >= 5
    for panel in quiet:
        description = panel["description"]
        assert any(word in description for word in ("worker mode only", "only after", "Fills in only")), panel["title"]
        assert panel["fieldConfig"]["defaults"].get("noValue"), panel["title"]


def test_the_dashboard_queries_both_metric_families():
    """Our modelhost_* panels and Triton's nv_* panels; the model and version selectors read a metric both
    Triton and this server export for every served version."""
    panels = _panels()
    assert any(_queried(p) and all(n.startswith("modelhost_") for n in _queried(p)) for p in panels)
    triton = [p for p in panels if _queried(p) and all(n.startswith("nv_") for n in _queried(p))]
    assert {"nv_inference_request_success", "nv_inference_request_failure", "nv_inference_queue_duration_us",
            "nv_inference_compute_infer_duration_us", "nv_inference_count", "nv_inference_exec_count",
            "nv_inference_pending_request_count"} <= set().union(*map(_queried, triton))  # fmt: skip
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    assert all("nv_inference_request_success" in v["definition"] for v in variables if "definition" in v)
