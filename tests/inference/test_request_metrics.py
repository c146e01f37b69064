"""The request counter, latency histogram and byte counters of
:func:`inference.observability.metrics.observe` (updated through
prometheus_client's values, not its children's public calls) as the
exposition renders them: bucket counts computed here with numpy, durations
on and between the bucket bounds."""

from __future__ import annotations

import numpy as np

from inference.observability import metrics
from tests.support.exposition import samples


def samples_of(text: bytes, prefix: str, model: str) -> dict[str, float]:
    """The samples (:func:`samples`) of ``model`` whose name starts with ``prefix``."""
    return {key: value for key, value in samples(text).items() if key.startswith(prefix) and f'model="{model}"' in key}


def test_observed_requests_render_their_counts_buckets_and_sums():
    model = "metrics-series-model"
    bounds = np.array(metrics._BUCKETS)
    # every bound exactly (counted in its own bucket: le is inclusive), between bounds, past the last
    durations = np.concatenate([bounds, (bounds[:-1] + bounds[1:]) / 2, [0.00001, 12.5, 100.0]])
    for seconds in durations:
        metrics.observe("grpc", model, "3", "success", float(seconds), 64, 128)
    metrics.count_step("grpc", model, "3", "success", 0.0004)  # an ensemble's step: counted, no bytes
    durations = np.append(durations, 0.0004)

    text = metrics.render_metrics()
    latency = samples_of(text, "modelhost_inference_request_duration_seconds", model)
    labels = f'model="{model}",outcome="success",protocol="grpc",version="3"'
    for bound in bounds:
        expected = int(np.count_nonzero(durations <= bound))
        assert latency[f'modelhost_inference_request_duration_seconds_bucket{{le="{bound}",{labels}}}'] == expected
    assert latency[f'modelhost_inference_request_duration_seconds_bucket{{le="+Inf",{labels}}}'] == len(durations)
    assert latency[f"modelhost_inference_request_duration_seconds_count{{{labels}}}"] == len(durations)
    assert np.isclose(latency[f"modelhost_inference_request_duration_seconds_sum{{{labels}}}"], durations.sum())
    requests = samples_of(text, "modelhost_inference_requests_total", model)
    assert requests == {f"modelhost_inference_requests_total{{{labels}}}": float(len(durations))}


def test_observed_bytes_add_up_per_direction():
    before = _bytes(metrics.render_metrics())
    for bytes_in, bytes_out in ((100, 7), (0, 5), (33, 0)):
        metrics.observe("tfserving", "metrics-bytes-model", "1", "success", 0.001, bytes_in, bytes_out)
    after = _bytes(metrics.render_metrics())
    assert after["in"] - before.get("in", 0.0) == 133
    assert after["out"] - before.get("out", 0.0) == 12


def _bytes(text: bytes) -> dict[str, float]:
    """{direction: bytes} of the tfserving byte counters."""
    return {
        direction: value
        for key, value in samples(text).items()
        for direction in ("in", "out")
        if key.startswith("modelhost_inference_request_bytes_total")
        and 'protocol="tfserving"' in key
        and f'direction="{direction}"' in key
    }
