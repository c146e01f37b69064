"""The session memory budget in RSS (issue 39): real ONNX Runtime sessions
of MatMul models with 16 MiB weights, loaded and evicted by a model runner in
a fresh Python process (so that its heaps hold nothing else and the
allocator settings touch no other test), whose RSS is read from
``/proc/self/statm``. Expected values are the artifacts' sizes, the
budget, and numpy's ``x @ W`` for the answers."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from inference.runtime import residency
from tests.support import onnx_models as m
from tests.support import stalls

MIB = 2**20
SIDE = 2048  # W: 2048 x 2048 FP32 = 16 MiB

pytestmark = pytest.mark.skipif(residency._LIBC is None, reason="glibc's malloc only")


def _write_models(root: Path, count: int) -> list[Path]:
    paths = [root / f"wide{i}.onnx" for i in range(count)]
    for i, path in enumerate(paths):
        path.write_bytes(m.matmul(SIDE, seed=i))
    return paths


# Runs in a fresh process: argv = mode ("bounded": this module's settings; "defaults": glibc's, no release),
# budget bytes, rounds, model paths. Prints JSON.
_DRIVER = textwrap.dedent(
    """
    import gc, json, sys
    import numpy as np
    from inference.runtime import residency
    from inference.runtime.execution import RunTarget
    from inference.runtime.onnx import OnnxModel, create_session, session_options
    from inference.runtime.runner import ModelRunner

    mode, budget, rounds, paths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    bounded = mode == "bounded"
    if bounded:
        assert residency.bound_heaps()
    sizes = {p: __import__("os").path.getsize(p) for p in paths}
    load = lambda t: OnnxModel(create_session(t.artifact, session_options()))
    runner = ModelRunner(load, budget, release=residency.release_freed_memory if bounded else None)
    x = np.random.default_rng(99).standard_normal((1, 2048), dtype=np.float32)
    targets = [RunTarget(f"m{i}", 1, f"sha{i}", p, sizes[p]) for i, p in enumerate(paths)]
    # ONNX Runtime's environment (thread pools, kernel registry), made by a process's first session, stays:
    # the idle process has one.
    warm = OnnxModel(create_session(paths[0], session_options()))
    warm.run({"x": np.ones((1, 2048), np.float32)}, ["y"])
    del warm
    gc.collect(); residency.release_freed_memory() if bounded else None
    idle = residency.rss_bytes()
    charged, rss, heads = [], [], {}
    for _ in range(rounds):
        for t in targets:
            y = runner.run(t, {"x": x}, ["y"]).outputs[0]
            heads.setdefault(t.artifact, y[0, :4].tolist())
            charged.append(runner.used)
            rss.append(residency.rss_bytes() - idle)
    costs = {t.artifact: runner.costs.estimate(t.key, t.size, 1) for t in targets}
    counts = dict(runner.counts)
    one = targets[0]
    y0 = runner.run(one, {"x": x}, ["y"]).outputs[0]
    runner.retain(set())  # nothing serves any more: every version unloads (no drain)
    del y, y0
    gc.collect()
    before_release = residency.rss_bytes() - idle
    residency.release_freed_memory() if bounded else None
    print(json.dumps({
        "charged": charged, "rss": rss, "costs": costs, "sizes": sizes, "counts": counts, "heads": heads,
        "after_unload": residency.rss_bytes() - idle, "before_release": before_release,
    }))
    """
)


def _drive(mode: str, budget: int, rounds: int, paths: list[Path]) -> dict:
    root = Path(__file__).resolve().parents[2]
    out = stalls.run(
        [sys.executable, "-c", _DRIVER, mode, str(budget), str(rounds), *map(str, paths)], 300,
        cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[Path]:
    return _write_models(tmp_path_factory.mktemp("wide"), 8)


def test_cyclic_access_at_twice_the_budget_holds_it_in_rss(models):
    """8 versions of 16 MiB, a budget of 4: the charged total never passes the
    budget, each version is charged about what its session holds (its
    weights: about its file, not the load's transient buffers), RSS above the
    idle process stays within the budget plus one transient version and
    ONNX Runtime's per-session overhead, and at least 40% of the requests after
    the first round find their version loaded."""
    budget = 4 * 16 * MIB + 4 * MIB  # four versions and their sessions' small allocations
    result = _drive("bounded", budget, 5, models)
    x = np.random.default_rng(99).standard_normal((1, SIDE), dtype=np.float32)
    for i, path in enumerate(models):  # the answers are right: x @ W, W as the builder draws it
        weight = np.random.default_rng(i).standard_normal((SIDE, SIDE), dtype=np.float32)
        np.testing.assert_allclose(result["heads"][str(path)], (x @ weight[:, :4])[0], rtol=1e-4, atol=1e-3)
    assert max(result["charged"]) <= budget
    for path, cost in result["costs"].items():
        size = result["sizes"][path]
        assert 0.9 * size <= cost <= 1.3 * size, (path, cost, size)
    transient = max(result["costs"].values())
    assert max(result["rss"]) <= budget + transient + 8 * MIB, [r // MIB for r in result["rss"]]
    counts = result["counts"]
    later = 4 * len(models)
    assert counts["hits"] + counts["misses"] == 5 * len(models)
    assert counts["hits"] / later >= 0.4, counts


def test_an_unloaded_versions_memory_goes_back_to_the_system(models):
    """After every version is unloaded, the process's RSS is back within a few
    MiB of what it was before the first load (with glibc's defaults, the
    freed weights stay in the heaps: at least two versions' worth, measured
    in the same run, so that the assertion is about the release)."""
    budget = 2 * 16 * MIB + 2 * MIB
    bounded = _drive("bounded", budget, 2, models)
    assert bounded["after_unload"] <= 6 * MIB, bounded["after_unload"] // MIB
    defaults = _drive("defaults", budget, 2, models)
    assert defaults["after_unload"] >= 2 * 16 * MIB, defaults["after_unload"] // MIB


def test_charges_are_measured_once_freed_memory_is_released():
    """With a release between loads, a growth of half the artifact is a
    measurement (charged as is); without, less than the artifact is taken for
    reused memory (charged the ratio of the measured loads)."""
    measured = residency.Costs(2.0, credible=0.5)
    assert measured.charge("a", 1000, 1, 800) == 800
    assert measured.charge("b", 1000, 1, 300) == int(1000 * 0.8)  # below half: the median ratio, 0.8
    guessed = residency.Costs(2.0)
    assert guessed.charge("a", 1000, 1, 800) == 2000  # no measurement yet: cost_factor x size


def test_the_operators_own_allocator_settings_are_left_alone(monkeypatch):
    """serve gives its processes the huge pages tunable unless GLIBC_TUNABLES
    is set; a process started with MALLOC_MMAP_THRESHOLD_ keeps that threshold."""
    assert residency.allocator_environment({}) == {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert residency.allocator_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == {}
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert residency.bound_heaps() is False


def test_front_end_processes_bound_their_heaps_with_or_without_a_budget(monkeypatch, settings):
    """Every HTTP and gRPC process bounds glibc's heaps (request buffers
    under 4 MiB reuse memory; tests/interop/test_grpc.py measures the page
    faults); SESSION_MEMORY_RELEASE=false leaves glibc's defaults."""
    from hosting import composition

    calls = []
    monkeypatch.setattr(residency, "bound_heaps", lambda: calls.append(1) or True)
    settings.SESSION_MEMORY_BUDGET_MB = 0
    assert composition.bound_heaps() is True
    assert calls == [1]
    settings.SESSION_MEMORY_RELEASE = False
    assert composition.bound_heaps() is False
    assert calls == [1]
