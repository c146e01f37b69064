"""The response cache's key and its byte budget (unit)."""

from __future__ import annotations

import numpy as np
import pytest

from inference.protocol.types import RequestInput
from inference.response_cache import ResponseCache, request_key


def _input(name="x", datatype="FP32", shape=(2, 2), data=None):
    data = np.arange(4, dtype=np.float32).reshape(shape) if data is None else data
    return RequestInput(name, datatype, tuple(shape), data)


def _key(**changes):
    request = {"model": "m", "version": 1, "sha256": "a" * 64, "inputs": [_input()], "output_names": ["y"]}
    request.update(changes)
    return request_key(**request)


def test_the_key_covers_everything_that_decides_the_answer():
    base = _key()
    assert _key() == base and len(base) == 32
    variants = {
        "model": _key(model="m2"),
        "version": _key(version=2),
        "artifact": _key(sha256="b" * 64),
        "input name": _key(inputs=[_input(name="z")]),
        "datatype": _key(inputs=[_input(datatype="INT32", data=np.arange(4, dtype=np.int32).reshape(2, 2))]),
        "shape (same bytes)": _key(inputs=[_input(shape=(4, 1), data=np.arange(4, dtype=np.float32).reshape(4, 1))]),
        "bytes": _key(inputs=[_input(data=np.arange(1, 5, dtype=np.float32).reshape(2, 2))]),
        "outputs": _key(output_names=["y", "p"]),
    }
    assert len({base, *variants.values()}) == len(variants) + 1, variants
    # Input order and output order do not matter; BYTES elements are delimited.
    two = [_input("a"), _input("b")]
    assert _key(inputs=two) == _key(inputs=two[::-1])
    assert _key(output_names=["y", "p"]) == _key(output_names=["p", "y"])
    words = [np.array([b"ab", b"c"], dtype=object), np.array([b"a", b"bc"], dtype=object)]
    keys = {_key(inputs=[RequestInput("t", "BYTES", (2,), w)]) for w in words}
    assert len(keys) == 2


def test_a_noncontiguous_input_hashes_as_its_values():
    data = np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::2]
    assert _key(inputs=[_input(data=data)]) == _key(inputs=[_input(data=np.ascontiguousarray(data))])


def test_least_recently_used_answers_go_first_under_the_budget():
    cache = ResponseCache(budget_bytes=8 * (400 + 256))
    answers = {i: (np.full(100, i, dtype=np.float32),) for i in range(12)}  # 400 B + 256 each
    for i in range(8):
        assert cache.put(bytes([i]), answers[i])
    assert len(cache) == 8 and cache.used == 8 * 656
    cache.get(bytes([0]))  # 0 is the most recent now
    cache.put(bytes([8]), answers[8])
    assert cache.get(bytes([1])) is None and cache.evictions == 1  # 1 was the least recent
    kept = cache.get(bytes([0]))
    np.testing.assert_array_equal(kept[0], answers[0][0])
    with pytest.raises(ValueError):
        kept[0][0] = 5  # read-only: nobody changes a cached answer
    answers[8][0][:] = -1  # the caller's array changing later changes nothing
    assert cache.get(bytes([8]))[0][0] == 8


def test_an_answer_over_an_eighth_of_the_budget_is_not_kept():
    cache = ResponseCache(budget_bytes=8000)
    assert not cache.put(b"big", (np.zeros(1000, dtype=np.float32),))
    assert cache.get(b"big") is None and cache.used == 0


# -- through the data plane: what a new version, a label move and a small budget do ----------
@pytest.fixture
def cached_plane(tmp_path, django_db_blocker):
    """A DataPlane over a registry with model "c" (v1: y = 2x + 1; its
    config enables the response cache) and a cache of ``budget`` bytes."""
    from inference.dataplane import DataPlane
    from inference.runtime.executors import InProcessExecutor, session_loader
    from inference.runtime.runner import ModelRunner
    from inference.serving.registry import ModelRegistry
    from models_store.intake.repository import import_repository
    from models_store.serving import StoreArtifacts, StoreRegistrySource
    from tests.support import onnx_models as m

    root = tmp_path / "repo"
    m.write_model(root, "c", m.affine(2.0, 1.0), config="response_cache { enable: true }\n")
    import_repository(root)
    planes = []

    def make(budget: int = 1 << 20) -> DataPlane:
        registry = ModelRegistry(StoreRegistrySource(), poll_seconds=0)
        executor = InProcessExecutor(ModelRunner(session_loader(StoreArtifacts())))
        registry.add_listener(executor.on_snapshot)
        registry.start()
        plane = DataPlane(registry, executor, "modelhost", "test", cache=ResponseCache(budget))
        planes.append(plane)
        return plane

    yield make
    for plane in planes:
        plane.registry.stop()


def _run(plane, x, version=None):
    from inference.protocol.types import InferenceRequest

    request = InferenceRequest("c", [RequestInput("x", "FP32", x.shape, x)], model_version=version)
    with plane.admit(None, "c") as admission:
        response = plane.infer(admission, request)
    return response.model_version, response.outputs[0].data


def _counts(plane, version: int) -> tuple[int, int, int]:
    stats = plane.statistics.read([("c", version)])[0]
    return stats.stages["cache_hit"].count, stats.stages["cache_miss"].count, stats.execution_count


@pytest.mark.db
@pytest.mark.django_db(transaction=True)
def test_a_new_version_and_a_label_move_never_serve_another_versions_answer(cached_plane):
    from models_store.intake import services as intake
    from models_store.registry import selectors
    from models_store.registry.services import models as model_services
    from models_store.registry.services import routes
    from tests.support import onnx_models as m
    from tests.support.store import person, stage

    plane = cached_plane()
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    assert _run(plane, x)[0] == "1" and _run(plane, x)[0] == "1"
    assert _counts(plane, 1) == (1, 1, 1)  # the second from the cache
    ops = person("ops", superuser=True)
    intake.version_upload(model_name="c", staged=stage(m.affine(3.0, 1.0)), actor=ops)  # latest: v2 serves now
    plane.registry.refresh()
    version, y = _run(plane, x)
    assert version == "2"
    np.testing.assert_allclose(y, 3 * x + 1)  # computed by v2, not v1's cached 2x + 1
    model = selectors.model_get("c")
    routes.label_set(model=model, name="stable", number=1, actor=ops)
    model_services.model_set_policy(
        model=model, policy="specific", specific=[1], actor=ops
    )  # the default moves back to v1
    plane.registry.refresh()
    version, y = _run(plane, x)
    assert version == "1"
    np.testing.assert_allclose(y, 2 * x + 1)
    assert _counts(plane, 1) == (2, 1, 1) and _counts(plane, 2) == (0, 1, 1)
    model_services.model_set_policy(
        model=model, policy="all", actor=ops
    )  # both serve; a request naming v2 gets v2's own entry
    plane.registry.refresh()
    np.testing.assert_allclose(_run(plane, x, version="2")[1], 3 * x + 1)
    assert _counts(plane, 2) == (1, 1, 1)


@pytest.mark.db
@pytest.mark.django_db(transaction=True)
def test_a_small_budget_evicts_the_least_recent_answer(cached_plane):
    entry = 16 + 256  # one [1, 4] FP32 answer as the cache counts it
    plane = cached_plane(budget=8 * entry)  # room for 8 answers (an answer may take up to 1/8 of it)
    xs = [np.full((1, 4), i, dtype=np.float32) for i in range(9)]
    for x in xs:
        _run(plane, x)  # nine misses: the ninth evicts the first
    assert len(plane.response_cache) == 8 and plane.response_cache.evictions == 1
    assert _counts(plane, 1) == (0, 9, 9)
    np.testing.assert_allclose(_run(plane, xs[8])[1], 2 * xs[8] + 1)  # kept: a hit
    np.testing.assert_allclose(_run(plane, xs[0])[1], 2 * xs[0] + 1)  # evicted: computed again
    assert _counts(plane, 1) == (1, 10, 10)
