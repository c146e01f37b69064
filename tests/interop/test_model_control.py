"""Triton's model control modes on ``serve`` (``--model-control-mode
none|poll|explicit``, ``--load-model``, ``--repository-poll-secs``), driven
with tritonclient over HTTP and gRPC against live servers whose repository
changes on disk; Triton's behaviour: its docs/user_guide/model_management.md
and core model_repository_manager.cc (LoadUnloadModel)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support import stalls
from tests.support.live import people_with_tokens, wait_for
from tests.support.server import ROOT, LiveServer

pytestmark = pytest.mark.interop

REFUSED = "explicit model load / unload is not allowed if polling is enabled"
#: Within a few poll periods of 1 s (a machine shared with other tests is slow at times).
POLL_TIMEOUT = 20


@pytest.fixture(scope="module")
def sklearn_models():
    """The demo's iris and digits classifiers, ONNX, and their config.pbtxt."""
    from models_store.management.commands.build_demo_repository import CONFIG, build_models

    return {name: (payload, CONFIG.format(name=name, features=n)) for name, (payload, n) in build_models().items()}


def started(repository, var_dir, *args: str) -> LiveServer:
    return LiveServer(repository, var_dir, args=args).start()


def affine_in(x: np.ndarray, scale: float, offset: float, client, name: str) -> bool:
    """Whether ``name`` (its default version) answers scale * x + offset over HTTP."""
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    try:
        got = client.infer(name, [inp]).as_numpy("y")
    except InferenceServerException:
        return False
    return np.allclose(got, scale * x + offset, rtol=1e-6)


def index_states(client, name: str) -> dict[str, str]:
    """Version -> state of ``name`` in the repository index."""
    return {e["version"]: e["state"] for e in client.get_model_repository_index() if e["name"] == name}


# -- explicit -----------------------------------------------------------------------
def test_explicit_loads_only_load_model_and_the_api_loads_the_others(tmp_path, sklearn_models):
    repository = tmp_path / "repo"
    for name, (payload, config) in sklearn_models.items():
        m.write_model(repository, name, payload, config=config)
    m.write_model(repository, "affine", m.affine(2.0, 1.0))
    server = started(
        repository, tmp_path / "var", "--model-control-mode", "explicit", "--load-model", "iris", "--log-verbose=1",
    )  # fmt: skip
    try:
        ops = {"authorization": f"Bearer {people_with_tokens(server, ops='superuser')['ops']}"}
        http = httpclient.InferenceServerClient(server.http_url)
        rpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert http.is_model_ready("iris") and rpc.is_model_ready("iris")
        assert http.get_log_settings(headers=ops)["log_verbose_level"] == 1  # --log-verbose, Triton's logging extension
        for other in ("digits", "affine"):
            assert not http.is_model_ready(other) and not rpc.is_model_ready(other)
            assert index_states(http, other) == {"1": "UNAVAILABLE"}
        assert index_states(http, "iris") == {"1": "READY"}
        assert {(e.name, e.state) for e in rpc.get_model_repository_index().models if e.name == "digits"} == {
            ("digits", "UNAVAILABLE")
        }

        from sklearn.datasets import load_digits, load_iris
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.linear_model import LogisticRegression

        iris = load_iris()
        features = iris.data.astype(np.float32)
        expected = LogisticRegression(max_iter=1000).fit(features, iris.target).predict(features[:30])
        inp = httpclient.InferInput("input", [30, 4], "FP32")
        inp.set_data_from_numpy(features[:30])
        np.testing.assert_array_equal(http.infer("iris", [inp]).as_numpy("label"), expected)

        rpc.load_model("digits", headers=ops)  # explicit: the repository API loads the others
        assert http.is_model_ready("digits") and rpc.is_model_ready("digits")
        digits = load_digits()
        images = digits.data.astype(np.float32)
        forest = RandomForestClassifier(n_estimators=30, max_depth=12, random_state=0).fit(images, digits.target)
        inp = grpcclient.InferInput("input", [5, 64], "FP32")
        inp.set_data_from_numpy(images[:5])
        np.testing.assert_array_equal(rpc.infer("digits", [inp]).as_numpy("label"), forest.predict(images[:5]))
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        http.load_model("affine", headers=ops)
        assert affine_in(x, 2.0, 1.0, http, "affine")
        http.unload_model("iris", headers=ops)
        assert not rpc.is_model_ready("iris") and index_states(http, "iris") == {"1": "UNAVAILABLE"}
        http.close()
        rpc.close()
    finally:
        assert server.stop() == 0, server.log()
    log = server.log()
    assert "model control mode explicit: loaded iris" in log


# -- none ---------------------------------------------------------------------------
def test_none_loads_every_model_and_refuses_load_and_unload(tmp_path):
    """Triton's none: every model of the repository is loaded at start (also
    one that was not loaded before the restart); load and unload refused."""
    repository = tmp_path / "repo"
    m.write_model(repository, "affine", m.affine(2.0, 1.0))
    m.write_model(repository, "other", m.affine(3.0, 0.0))
    server = started(repository, tmp_path / "var", "--model-control-mode", "explicit", "--load-model", "other")
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        assert not http.is_model_ready("affine") and http.is_model_ready("other")
    finally:
        assert server.stop() == 0, server.log()
    server = started(repository, tmp_path / "var", "--model-control-mode", "none")
    try:
        ops = {"authorization": f"Bearer {people_with_tokens(server, ops='superuser')['ops']}"}
        http = httpclient.InferenceServerClient(server.http_url)
        rpc = grpcclient.InferenceServerClient(server.grpc_url)
        x = np.ones((3, 4), dtype=np.float32)
        assert affine_in(x, 2.0, 1.0, http, "affine") and affine_in(x, 3.0, 0.0, http, "other")
        for call in ("load_model", "unload_model"):
            with pytest.raises(InferenceServerException) as refused:
                getattr(http, call)("affine", headers=ops)
            assert refused.value.status() == "503" and refused.value.message() == REFUSED
            with pytest.raises(InferenceServerException) as refused:
                getattr(rpc, call)("other", headers=ops)
            assert refused.value.status() == "StatusCode.UNAVAILABLE" and REFUSED in refused.value.message()
            with pytest.raises(InferenceServerException) as refused:  # without a credential too
                getattr(http, call)("affine")
            assert refused.value.status() == "503"
        assert rpc.is_model_ready("affine") and rpc.is_model_ready("other")  # nothing changed
        # none: the repository is not read again
        m.write_model(repository, "later", m.affine(1.0, 1.0))
        assert not wait_for(lambda: index_states(http, "later"), timeout=3)
        http.close()
        rpc.close()
    finally:
        assert server.stop() == 0, server.log()


# -- poll ---------------------------------------------------------------------------
def test_poll_follows_the_repository_on_disk(tmp_path):
    repository = tmp_path / "repo"
    m.write_model(repository, "affine", m.affine(2.0, 1.0))
    m.write_model(repository, "leaving", m.affine(3.0, 0.0))
    server = started(
        repository, tmp_path / "var", "--model-control-mode", "poll", "--repository-poll-secs", "1",
        "--http-address", "127.0.0.1", "--grpc-address=127.0.0.1",
    )  # fmt: skip
    x = np.array([[0.5, -1.0, 2.0, 4.0]], dtype=np.float32)
    try:
        ops = {"authorization": f"Bearer {people_with_tokens(server, ops='superuser')['ops']}"}
        http = httpclient.InferenceServerClient(server.http_url)
        rpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert affine_in(x, 2.0, 1.0, http, "affine") and affine_in(x, 3.0, 0.0, http, "leaving")
        with pytest.raises(InferenceServerException) as refused:
            rpc.load_model("affine", headers=ops)
        assert refused.value.status() == "StatusCode.UNAVAILABLE" and REFUSED in refused.value.message()

        # a new model directory: imported and served
        m.write_model(repository, "arriving", m.affine(-1.0, 0.25))
        assert wait_for(lambda: affine_in(x, -1.0, 0.25, http, "arriving"), timeout=POLL_TIMEOUT), server.log()
        assert rpc.is_model_ready("arriving")

        # a new version directory: the version policy (latest 1) serves it
        m.write_model(repository, "affine", m.affine(5.0, 0.0), version=2)
        assert wait_for(lambda: affine_in(x, 5.0, 0.0, http, "affine"), timeout=POLL_TIMEOUT), server.log()
        assert rpc.is_model_ready("affine", "2") and index_states(http, "affine") == {"1": "UNAVAILABLE", "2": "READY"}

        # the version directory removed: version 1 serves again
        shutil.rmtree(repository / "affine" / "2")
        assert wait_for(lambda: affine_in(x, 2.0, 1.0, http, "affine"), timeout=POLL_TIMEOUT), server.log()
        assert not rpc.is_model_ready("affine", "2") and rpc.is_model_ready("affine", "1")

        # a model directory removed: unavailable, in the index still
        shutil.rmtree(repository / "leaving")
        assert wait_for(lambda: not http.is_model_ready("leaving"), timeout=POLL_TIMEOUT), server.log()
        assert not rpc.is_model_ready("leaving") and index_states(http, "leaving") == {"1": "UNAVAILABLE"}
        inp = grpcclient.InferInput("x", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException, match="leaving"):
            rpc.infer("leaving", [inp])

        # ... and back: served again
        m.write_model(repository, "leaving", m.affine(3.0, 0.0))
        assert wait_for(lambda: affine_in(x, 3.0, 0.0, http, "leaving"), timeout=POLL_TIMEOUT), server.log()

        # a changed config.pbtxt is applied (here: the version policy)
        m.write_model(repository, "affine", m.affine(7.0, 0.0), version=3)
        assert wait_for(lambda: affine_in(x, 7.0, 0.0, http, "affine"), timeout=POLL_TIMEOUT), server.log()
        assert not http.is_model_ready("affine", "1")
        (repository / "affine" / "config.pbtxt").write_text("version_policy: { all { } }\n")
        assert wait_for(lambda: http.is_model_ready("affine", "1"), timeout=POLL_TIMEOUT), server.log()
        assert rpc.is_model_ready("affine", "3")
        http.close()
        rpc.close()
    finally:
        assert server.stop() == 0, server.log()


# -- refused flags ------------------------------------------------------------------
def serve(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VAR_DIR=str(tmp_path / "var"))
    env.pop("DATABASE_URL", None)
    command = [sys.executable, "manage.py", "serve", "--http-port", "0", *args]
    return stalls.run(command, 120, cwd=ROOT, env=env)


def test_bad_flags_and_exit_on_error_end_serve_with_a_clear_error(tmp_path):
    """Every refused flag: tests/models_store/test_model_control.py (in process)."""
    result = serve(tmp_path, "--model-control-mode", "sometimes")
    assert result.returncode == 2 and "invalid model control mode 'sometimes'" in result.stderr, result.stderr
    repository = tmp_path / "repo"
    m.write_model(repository, "good", m.affine(2.0, 1.0))
    m.write_model(repository, "broken", b"not an onnx model")
    result = serve(tmp_path, "--model-repository", str(repository), "--exit-on-error")
    assert result.returncode == 1 and "models failed to load (--exit-on-error)" in result.stderr, result.stderr
    assert "broken: not a readable ONNX model" in result.stderr and "good" not in result.stderr
    result = serve(tmp_path, "--model-repository", str(repository), "--exit-on-error=true",
                   "--model-control-mode=explicit", "--load-model=good", "--load-model=missing")  # fmt: skip
    assert result.returncode == 1 and "--load-model missing: no such model" in result.stderr, result.stderr
    assert "broken" not in result.stderr  # not asked for: explicit loads only --load-model
