"""Priority levels and queue policies of the dynamic batcher as a Triton
client sees them (tritonclient over HTTP and gRPC, ``infer(..., priority=,
timeout=)``), in process and in worker mode, on the test repository's
``queue_policy`` model (tests/support/repository.py QUEUE_POLICY_CONFIG:
y = 5x + 1, batches of up to 4 rows, one-row requests held 1 s for a
fuller batch; level 1 plain, 2 the default (DELAY), 3 holds one request,
4 REJECT; levels 2 and 4 let a request shorten their 30 s queue timeout).

Requests are held in the queue by the batching window (wall-clock time),
not by a busy model, so the orders asserted do not depend on the machine's
speed: a 4-row request is a full batch and runs as soon as it is served
first. In process, each HTTP server process has its own batcher (requests
on other connections may meet other queues), so the tests of an order
between requests run over gRPC (one process), and over HTTP in worker mode
(one worker batches every front end's requests).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXECUTOR
from tests.support.live import in_time, wait_for

pytestmark = pytest.mark.interop

MODEL = "queue_policy"
WINDOW = 1.0  # seconds: max_queue_delay_microseconds
UNAVAILABLE = {"http": "503", "grpc": "StatusCode.UNAVAILABLE"}


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def _expected(x: np.ndarray) -> np.ndarray:
    return 5 * x + 1


class Requests:
    """Requests sent from threads, each on its own client: their answers
    (or errors) and when each was sent and answered (time.monotonic())."""

    def __init__(self, server, protocol: str):
        self.server, self.protocol = server, protocol
        self.answers: dict = {}
        self.times: dict[str, tuple[float, float]] = {}
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def infer(self, x: np.ndarray, priority: int = 0, timeout: int | None = None) -> np.ndarray:
        """One request now, in this thread: y, or InferenceServerException."""
        if self.protocol == "http":
            module, client = httpclient, httpclient.InferenceServerClient(self.server.http_url)
        else:
            module, client = grpcclient, grpcclient.InferenceServerClient(self.server.grpc_url)
        inp = module.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        try:
            return client.infer(MODEL, [inp], priority=priority, timeout=timeout).as_numpy("y")
        finally:
            client.close()

    def send(self, name: str, x: np.ndarray, priority: int = 0, timeout: int | None = None, pause: float = 0.2):
        def call():
            sent = time.monotonic()
            try:
                answer = self.infer(x, priority, timeout)
            except InferenceServerException as exc:
                answer = exc
            with self._lock:
                self.answers[name] = answer
                self.times[name] = (sent, time.monotonic())

        thread = threading.Thread(target=call)
        thread.start()
        self.threads.append(thread)
        time.sleep(pause)  # it reaches the queue before the next

    def join(self) -> dict:
        for thread in self.threads:
            thread.join(60)
        return self.answers


def _needs_one_queue(protocol: str) -> None:
    if protocol == "http" and EXECUTOR != "workers":
        pytest.skip("in process each HTTP server process batches its own requests (run in worker mode)")


def _stats(server) -> dict:
    (stats,) = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(MODEL)["model_stats"]
    return {
        "fail": int(stats["inference_stats"]["fail"]["count"]),
        "success": int(stats["inference_stats"]["success"]["count"]),
        "executions": int(stats["execution_count"]),
    }


def _settles(server, before: dict, **delta) -> bool:
    """Whether the model's counts reach ``before`` + ``delta`` (then stay there a moment)."""

    def reached() -> bool:
        now = _stats(server)
        return all(now[key] - before[key] == value for key, value in delta.items())

    return wait_for(reached, timeout=10) and (time.sleep(0.3) or reached())


def test_the_configuration_shows_levels_and_policies_as_triton_writes_them(model_server):
    config = httpclient.InferenceServerClient(model_server.http_url).get_model_config(MODEL)
    policy = {"timeout_action": "REJECT", "default_timeout_microseconds": 0, "allow_timeout_override": False}
    assert config["dynamic_batching"] == {
        "preferred_batch_size": [4],
        "max_queue_delay_microseconds": 1000000,
        "preserve_ordering": False,
        "priority_levels": 4,
        "default_priority_level": 2,
        "default_queue_policy": {
            "timeout_action": "DELAY",
            "default_timeout_microseconds": 30000000,
            "allow_timeout_override": True,
            "max_queue_size": 0,
        },
        "priority_queue_policy": {
            "1": {**policy, "max_queue_size": 0},
            "3": {**policy, "max_queue_size": 1},
            "4": {
                **policy,
                "default_timeout_microseconds": 30000000,
                "allow_timeout_override": True,
                "max_queue_size": 0,
            },
        },
    }
    grpc_config = grpcclient.InferenceServerClient(model_server.grpc_url).get_model_config(MODEL).config
    batching = grpc_config.dynamic_batching
    assert (batching.priority_levels, batching.default_priority_level) == (4, 2)
    assert batching.default_queue_policy.timeout_action == 1  # DELAY
    assert batching.priority_queue_policy[3].max_queue_size == 1
    assert batching.priority_queue_policy[4].default_timeout_microseconds == 30000000
    metadata = httpclient.InferenceServerClient(model_server.http_url).get_server_metadata()
    assert "schedule_policy" in metadata["extensions"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_full_queue_refuses_the_next_request_at_once(model_server, protocol):
    """Level 3 holds one request. Over gRPC (one process, or the one worker)
    the second is refused; over HTTP three are sent, so that at least one
    meets a full queue even when the HTTP server's processes each batch
    their own (in worker mode two are refused). A refused request answers
    at once with Triton's UNAVAILABLE "Exceeds maximum queue size" and is
    not counted as a failed inference (Triton counts only what it queued);
    the queued ones run after the window."""
    before = _stats(model_server)
    requests = Requests(model_server, protocol)
    xs = [_rows(1, seed) for seed in range(3 if protocol == "http" else 2)]
    for index, x in enumerate(xs):
        requests.send(f"r{index}", x, priority=3)
    answers = requests.join()
    refused = [name for name, answer in answers.items() if isinstance(answer, InferenceServerException)]
    assert "r0" not in refused and len(refused) >= 1
    if protocol == "grpc" or EXECUTOR == "workers":
        assert refused == [f"r{index}" for index in range(1, len(xs))]
    for name in refused:
        error = answers[name]
        assert error.status() == UNAVAILABLE[protocol], (error.status(), error.message())
        assert "Exceeds maximum queue size" in error.message()
        sent, answered = requests.times[name]
        assert answered - sent < WINDOW / 2  # at once, not after the window
    for index, x in enumerate(xs):
        if f"r{index}" not in refused:
            np.testing.assert_allclose(answers[f"r{index}"], _expected(x), rtol=1e-6)
    assert _settles(model_server, before, fail=0, success=len(xs) - len(refused))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_reject_refuses_a_request_whose_queue_timeout_passed(model_server, protocol):
    """Level 4 (REJECT) with the request's 200 ms timeout: refused then, with
    Triton's UNAVAILABLE "Request timeout expired", before the window ends,
    counted as a failed inference and never run; a level-1 request sent
    with it runs alone after the window."""
    before = _stats(model_server)
    requests = Requests(model_server, protocol)
    late, kept = _rows(1, 10), _rows(1, 11)
    requests.send("late", late, priority=4, timeout=200_000, pause=0)
    requests.send("kept", kept, priority=1, pause=0)
    answers = requests.join()
    error = answers["late"]
    assert isinstance(error, InferenceServerException), error
    assert error.status() == UNAVAILABLE[protocol] and "Request timeout expired" in error.message(), error.message()
    sent, answered = requests.times["late"]
    assert 0.2 <= answered - sent < WINDOW
    np.testing.assert_allclose(answers["kept"], _expected(kept), rtol=1e-6)
    assert _settles(model_server, before, fail=1, success=1, executions=1)  # the refused request never ran


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_delay_serves_a_timed_out_request_after_those_sent_later(model_server, protocol):
    """Level 2 (DELAY): a one-row request whose 100 ms queue timeout passed
    is served after a full batch sent later, which runs at once; while its
    timeout has not passed, the full batch waits behind it for the window."""
    _needs_one_queue(protocol)
    for timeout in (100_000, None):

        def scenario(timeout=timeout) -> bool:
            requests = Requests(model_server, protocol)
            one, full = _rows(1, 20), _rows(4, 21)
            requests.send("one", one, timeout=timeout, pause=0.4)
            requests.send("full", full, pause=0)
            answers = requests.join()
            np.testing.assert_allclose(answers["one"], _expected(one), rtol=1e-6)
            np.testing.assert_allclose(answers["full"], _expected(full), rtol=1e-6)
            window_end = requests.times["one"][0] + WINDOW
            if requests.times["full"][0] > window_end - 0.4:
                return False
            assert requests.times["one"][1] >= window_end  # a one-row request waits out its window either way
            if timeout:  # delayed: the full batch went first, at once
                assert requests.times["full"][1] < window_end - 0.3, requests.times
            else:
                assert requests.times["full"][1] >= window_end, requests.times
            return True

        in_time(scenario)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_higher_priority_request_sent_later_completes_first(model_server, protocol):
    """Two one-row requests at level 2 wait for the window; a full batch sent
    after them at priority 1 completes at once, before them. At priority 0
    or one beyond the levels (both: the default level, 2) it completes after them."""
    _needs_one_queue(protocol)
    for priority in (1, 0, 99):

        def scenario(priority=priority) -> bool:
            requests = Requests(model_server, protocol)
            low, high = [_rows(1, 30), _rows(1, 31)], _rows(4, 32)
            requests.send("low1", low[0], priority=2, pause=0.1)
            requests.send("low2", low[1], priority=2, pause=0.2)
            requests.send("high", high, priority=priority, pause=0)
            answers = requests.join()
            np.testing.assert_allclose(answers["low1"], _expected(low[0]), rtol=1e-6)
            np.testing.assert_allclose(answers["low2"], _expected(low[1]), rtol=1e-6)
            np.testing.assert_allclose(answers["high"], _expected(high), rtol=1e-6)
            window_end = requests.times["low1"][0] + WINDOW
            if requests.times["high"][0] > window_end - 0.4:
                return False
            ends = {name: answered for name, (_, answered) in requests.times.items()}
            if priority == 1:
                assert ends["high"] < min(ends["low1"], ends["low2"]) and ends["high"] < window_end - 0.3, ends
            else:
                assert ends["high"] >= window_end, (priority, requests.times)
            return True

        in_time(scenario)
