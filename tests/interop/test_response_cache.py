"""The response cache with Triton's clients (HTTP and gRPC, in process and in
worker mode): a repeated request is answered from the cache and counted as
Triton counts it (cache_hit / cache_miss; no execution), a different one is
computed; the config says so."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

pytestmark = pytest.mark.interop

MODEL = "cached"  # y = 4x - 2, FP32 [N, 4], response_cache { enable: true }


def _stats(client) -> dict:
    stats = client.get_inference_statistics(MODEL)["model_stats"][0]
    inference = stats["inference_stats"]
    return {
        "hits": inference["cache_hit"]["count"], "misses": inference["cache_miss"]["count"],
        "success": inference["success"]["count"], "executions": stats["execution_count"],
        "inferences": stats["inference_count"], "computed": inference["compute_infer"]["count"],
    }  # fmt: skip


def _delta(after: dict, before: dict) -> dict:
    return {key: after[key] - before[key] for key in after}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_repeated_request_is_answered_from_the_cache(model_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = model_server.http_url if protocol == "http" else model_server.grpc_url
    http = httpclient.InferenceServerClient(model_server.http_url)
    client = module.InferenceServerClient(url)
    rng = np.random.default_rng(11 if protocol == "http" else 12)  # inputs no other test sent
    x = rng.standard_normal((3, 4)).astype(np.float32)
    other = rng.standard_normal((3, 4)).astype(np.float32)

    def infer(data):
        inp = module.InferInput("x", list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        return client.infer(MODEL, [inp]).as_numpy("y")

    before = _stats(http)
    answers = [infer(x), infer(x), infer(other), infer(x)]
    for got, sent in zip(answers, (x, x, other, x), strict=True):
        np.testing.assert_allclose(got, 4 * sent - 2, rtol=1e-6)
    change = _delta(_stats(http), before)
    # 4 successes: 2 computed (x, other; no max_batch_size: one inference each), 2 answered from the
    # cache (Triton counts no inference for them); each computed one was a miss first.
    assert change == {"hits": 2, "misses": 2, "success": 4, "executions": 2, "inferences": 2, "computed": 2}, change


def test_the_config_says_the_cache_is_on(model_server):
    config = httpclient.InferenceServerClient(model_server.http_url).get_model_config(MODEL)
    assert config["response_cache"] == {"enable": True}
    other = httpclient.InferenceServerClient(model_server.http_url).get_model_config("affine")
    assert other["response_cache"] == {"enable": False}


@pytest.fixture(scope="module")
def shared_cache_server(tmp_path_factory):
    """A server whose processes share the response cache through Redis (a
    database of its own, flushed first): "cached" (y = 4x - 2) only."""
    import redis

    from tests.support import onnx_models as m
    from tests.support import redis_db
    from tests.support.server import serve_live

    url = redis_db.url("TEST_RESPONSE_CACHE_REDIS_DB", 6)
    redis.Redis.from_url(url).flushdb()
    repository = tmp_path_factory.mktemp("shared-cache-repository")
    m.write_model(repository, MODEL, m.affine(4.0, -2.0), config="response_cache { enable: true }\n")
    yield from serve_live(repository, tmp_path_factory.mktemp("shared-cache"), {"RESPONSE_CACHE_REDIS_URL": url})


def test_with_redis_an_answer_computed_by_one_process_serves_another(shared_cache_server):
    """The HTTP and the gRPC process are different processes: the request
    computed over HTTP is a hit over gRPC (without Redis: two misses)."""
    x = np.random.default_rng(21).standard_normal((2, 4)).astype(np.float32)
    http = httpclient.InferenceServerClient(shared_cache_server.http_url)
    grpc_client = grpcclient.InferenceServerClient(shared_cache_server.grpc_url)
    before = _stats(http)
    for module, client in ((httpclient, http), (grpcclient, grpc_client)):
        inp = module.InferInput("x", [2, 4], "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_allclose(client.infer(MODEL, [inp]).as_numpy("y"), 4 * x - 2, rtol=1e-6)
    change = _delta(_stats(http), before)
    assert change == {"hits": 1, "misses": 1, "success": 2, "executions": 1, "inferences": 1, "computed": 1}, change
