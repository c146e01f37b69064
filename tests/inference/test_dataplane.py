"""The DataPlane over a real registry (imported models, SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from inference.dataplane import DataPlane
from inference.protocol.errors import InvalidInput, ModelNotFound, ModelNotReady, PermissionDenied
from inference.protocol.types import InferenceRequest, RequestedOutput, RequestInput
from inference.runtime.executors import InProcessExecutor, session_loader
from inference.runtime.runner import ModelRunner
from inference.serving.registry import ModelRegistry
from models_store.intake.repository import import_repository
from models_store.models import ModelVersion, RegisteredModel
from models_store.registry.services import routes
from models_store.serving import StoreArtifacts, StoreRegistrySource
from tests.support import onnx_models as m
from tests.support.store import force_state

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    m.write_model(root, "simple", m.add_sub("INT32"))
    m.write_model(root, "affine", m.affine(2.0, 1.0), config='max_batch_size: 2\ninput [ { name: "x" dims: [4] } ]')
    m.write_model(root, "strings", m.string_suffix("?"))
    m.write_model(root, "v", m.affine(1.0, 1.0), version=1)
    m.write_model(root, "v", m.affine(1.0, 2.0), version=2)
    m.write_model(root, "broken", b"nope")
    import_repository(root)
    return root


@pytest.fixture
def dataplane(repo):
    registry = ModelRegistry(StoreRegistrySource(), poll_seconds=0)
    executor = InProcessExecutor(ModelRunner(session_loader(StoreArtifacts())))
    registry.add_listener(executor.on_snapshot)
    registry.start()
    yield DataPlane(registry, executor, "modelhost", "test")
    registry.stop()


def _infer(dataplane, request):
    """An inference as adapters make it: admitted (anonymous), then run."""
    with dataplane.admit(None, request.model_name) as admission:
        return dataplane.infer(admission, request)


def _simple(a, b, **kwargs):
    return InferenceRequest(
        "simple",
        [RequestInput("INPUT0", "INT32", a.shape, a), RequestInput("INPUT1", "INT32", b.shape, b)],
        **kwargs,
    )


def test_infer_computes_and_echoes(dataplane):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 7, dtype=np.int32)
    response = _infer(dataplane, _simple(a, b, id="x-1"))
    assert (response.model_name, response.model_version, response.id) == ("simple", "1", "x-1")
    outputs = {o.name: o for o in response.outputs}
    np.testing.assert_array_equal(outputs["OUTPUT0"].data, a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"].data, a - b)
    assert outputs["OUTPUT0"].datatype == "INT32" and outputs["OUTPUT0"].shape == (2, 16)


def test_an_admission_runs_only_its_own_model(dataplane):
    """infer takes the admission admit returns: one to another model is refused
    (PERMISSION_DENIED), on the thread and the event-loop paths alike."""
    a = np.ones((1, 16), dtype=np.int32)
    with dataplane.admit(None, "affine") as admission:
        with pytest.raises(PermissionDenied, match="admitted to model 'affine', not to 'simple'"):
            dataplane.infer(admission, _simple(a, a))

    async def on_the_loop():
        admission = await dataplane.admit_async(None, "affine")
        async with admission:
            with pytest.raises(PermissionDenied, match="admitted to model 'affine'"):
                await dataplane.infer_async(admission, _simple(a, a))
        async with await dataplane.admit_async(None, "simple") as admission:
            return await dataplane.infer_async(admission, _simple(a, a))

    answers = []  # a thread of its own: other tests (Playwright) may leave a loop running in this one
    thread = threading.Thread(target=lambda: answers.append(asyncio.run(on_the_loop())))
    thread.start()
    thread.join(30)
    np.testing.assert_array_equal(answers[0].outputs[0].data, a + a)


def test_a_request_that_waited_for_a_seat_keeps_the_deadline_of_its_arrival(dataplane, monkeypatch):
    """On the event loop (gRPC), a request that waits for a seat of its
    version runs with the deadline its ``timeout`` parameter gives from its
    arrival (as Triton counts it), not one counted again after the wait."""
    a = np.ones((1, 16), dtype=np.int32)
    entry = dataplane.route("simple")
    gate = dataplane.fair.gate(entry.target, entry.instance_group)
    deadlines = []
    run = dataplane.executor.run

    def recording(target, feeds, names, rows, deadline, *args, **kwargs):
        deadlines.append(deadline)
        return run(target, feeds, names, rows, deadline, *args, **kwargs)

    monkeypatch.setattr(dataplane.executor, "run", recording)
    seats = 0
    while gate.try_enter():  # every seat taken: the request waits for one
        seats += 1
    assert seats >= 1

    async def waits_half_a_second():
        async with await dataplane.admit_async(None, "simple") as admission:
            arrived = time.monotonic()
            task = asyncio.ensure_future(
                dataplane.infer_async(admission, _simple(a, a, parameters={"timeout": 2_000_000}))
            )
            await asyncio.sleep(0.5)
            assert not task.done()
            for _ in range(seats):
                gate.leave()
            return arrived, await task

    answers = []  # a thread of its own: other tests (Playwright) may leave a loop running in this one
    thread = threading.Thread(target=lambda: answers.append(asyncio.run(waits_half_a_second())))
    thread.start()
    thread.join(30)
    arrived, response = answers[0]
    np.testing.assert_array_equal(response.outputs[0].data, a + a)
    assert len(deadlines) == 1
    assert arrived + 1.9 < deadlines[0] <= arrived + 2.0 + 0.05, deadlines[0] - arrived  # not arrived + 2.5


def test_requested_output_subset_and_order(dataplane):
    a = np.ones((1, 16), dtype=np.int32)
    response = _infer(dataplane, _simple(a, a, outputs=[RequestedOutput("OUTPUT1"), RequestedOutput("OUTPUT0")]))
    assert [o.name for o in response.outputs] == ["OUTPUT1", "OUTPUT0"]
    np.testing.assert_array_equal(response.outputs[0].data, np.zeros((1, 16)))


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (
            lambda r: r.inputs.pop(),
            "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
            "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
        ),
        (
            lambda r: r.inputs.append(RequestInput("Z", "INT32", (1,), np.ones(1, np.int32))),
            "expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) ['INPUT0','INPUT1','Z'], "
            "but missing required input(s) []. Please provide all required input(s).",
        ),
        (
            lambda r: r.inputs.__setitem__(1, RequestInput("Z", "INT32", (1,), np.ones(1, np.int32))),
            "unexpected inference input 'Z' for model 'simple'",
        ),
        (lambda r: r.inputs.append(r.inputs[0]), "input 'INPUT0' already exists in request"),
        (
            lambda r: setattr(r.inputs[0], "datatype", "INT64"),
            "inference input 'INPUT0' data-type is 'INT64', but model 'simple' expects 'INT32'",
        ),
        (lambda r: setattr(r.inputs[0], "shape", (1, 15)), "expects [-1, 16]"),
        (lambda r: setattr(r.inputs[0], "shape", (16,)), "expects [-1, 16]"),
        (lambda r: setattr(r, "outputs", [RequestedOutput("NOPE")]), "unexpected inference output 'NOPE' for model"),
        (
            lambda r: setattr(r, "outputs", [RequestedOutput("OUTPUT0")] * 2),
            "output 'OUTPUT0' already exists in request",
        ),
    ],
)
def test_invalid_requests(dataplane, mutate, needle):
    a = np.ones((1, 16), dtype=np.int32)
    request = _simple(a, a)
    mutate(request)
    with pytest.raises(InvalidInput) as info:
        _infer(dataplane, request)
    assert needle in info.value.message


def test_batch_limit(dataplane):
    x = np.zeros((3, 4), dtype=np.float32)
    with pytest.raises(InvalidInput, match="max_batch_size 2"):
        _infer(dataplane, InferenceRequest("affine", [RequestInput("x", "FP32", x.shape, x)]))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = _infer(dataplane, InferenceRequest("affine", [RequestInput("x", "FP32", x.shape, x)])).outputs[0]
    np.testing.assert_allclose(out.data, 2 * x + 1)


def test_strings_decoded_for_the_model_and_refused_when_not_utf8(dataplane):
    text = np.array(["ça".encode(), b"ok"], dtype=object)
    out = _infer(dataplane, InferenceRequest("strings", [RequestInput("text", "BYTES", (2,), text)])).outputs[0]
    assert list(out.data) == ["ça?", "ok?"]
    bad = np.array([b"\xc3"], dtype=object)
    with pytest.raises(InvalidInput, match="inference input 'text': BYTES element 0 is not valid UTF-8"):
        _infer(dataplane, InferenceRequest("strings", [RequestInput("text", "BYTES", (1,), bad)]))


def test_versions_not_found_not_ready(dataplane):
    x = np.zeros((1, 4), dtype=np.float32)
    request = InferenceRequest("v", [RequestInput("x", "FP32", x.shape, x)])
    assert _infer(dataplane, request).model_version == "2"  # latest 1 by default
    request.model_version = "1"
    with pytest.raises(ModelNotReady, match="not served by the model's version policy"):
        _infer(dataplane, request)
    request.model_version = "3"
    with pytest.raises(ModelNotFound, match=r"Request for unknown model: '.*' version 3 is not found"):
        _infer(dataplane, request)
    with pytest.raises(ModelNotFound, match="Request for unknown model: 'nope' is not found"):
        dataplane.model_metadata("nope")
    with pytest.raises(ModelNotReady, match="FAILED"):
        dataplane.model_metadata("broken")
    assert dataplane.model_ready("v") and dataplane.model_ready("v", "2")
    assert not dataplane.model_ready("v", "1")
    assert not dataplane.model_ready("broken")


def test_metadata(dataplane):
    meta = dataplane.model_metadata("affine")
    assert meta.versions == ("1",)
    assert [(t.name, t.datatype, t.shape) for t in meta.inputs] == [("x", "FP32", (-1, 4))]
    server = dataplane.server_metadata()
    assert server.name == "modelhost" and "binary_tensor_data" in server.extensions
    assert dataplane.live() and dataplane.ready()


def test_registry_follows_writes_and_drops_stale_sessions(dataplane, repo):
    x = np.zeros((1, 4), dtype=np.float32)
    request = InferenceRequest("v", [RequestInput("x", "FP32", x.shape, x)])
    np.testing.assert_allclose(_infer(dataplane, request).outputs[0].data, x + 2)
    assert len(dataplane.executor.runner.loaded()) == 1
    # A new version imported in this process is served at once (registry_changed on commit).
    m.write_model(repo, "v", m.affine(1.0, 3.0), version=3)
    import_repository(repo)
    response = _infer(dataplane, request)
    assert response.model_version == "3"
    np.testing.assert_allclose(response.outputs[0].data, x + 3)
    assert len(dataplane.executor.runner.loaded()) == 1  # version 2's session was dropped
    # A version that fails disappears; the policy falls back to the newest READY one.
    force_state(ModelVersion.objects.get(model__name="v", number=3), "FAILED", "broken on purpose")
    assert _infer(dataplane, request).model_version == "2"
    # A policy change takes effect too.
    model = RegisteredModel.objects.get(name="v")
    model.version_policy = "all"
    model.save()
    force_state(ModelVersion.objects.get(model__name="v", number=1), "READY")
    assert dataplane.model_metadata("v").versions == ("2", "1")


def _in_another_process(write, *args, **kwargs):
    """Run a registry write without this process's change signal, as if
    another process made it: only the change stamp tells."""
    from models_store.stamp import registry_changed

    receivers = registry_changed.receivers
    registry_changed.receivers = []
    try:
        return write(*args, **kwargs)
    finally:
        registry_changed.receivers = receivers


def test_registry_poll_sees_other_process_writes(repo):
    """Without the local signal, the change stamp is what the poller reads."""
    registry = ModelRegistry(StoreRegistrySource(), poll_seconds=0, miss_seconds=0)
    registry.refresh(force=True)
    assert "late" not in registry.models
    m.write_model(repo, "late", m.identity("INT8"))
    _in_another_process(import_repository, repo)
    assert "late" not in registry.models
    assert registry.refresh() is True
    assert registry.models["late"].default.number == 1
    assert registry.refresh() is False  # stamp unchanged: no rebuild


def test_a_miss_catches_up_with_other_process_writes(repo):
    """A lookup that misses reads the stamp once and, if it moved, answers
    from the rebuilt snapshot: new models, versions, labels and versions
    that became READY serve at once, without waiting for the poller."""
    registry = ModelRegistry(StoreRegistrySource(), poll_seconds=0, miss_seconds=0)
    registry.refresh(force=True)
    m.write_model(repo, "late", m.identity("INT8"))
    _in_another_process(import_repository, repo)
    assert registry.resolve("late", None).number == 1

    version = ModelVersion.objects.get(model__name="late", number=1)
    _in_another_process(force_state, version, "FAILED", "lost its file")
    assert registry.refresh() is True
    _in_another_process(force_state, version, "READY")
    assert registry.resolve("late", "1").serving  # was FAILED in the snapshot
    _in_another_process(force_state, version, "FAILED", "lost its file")
    registry.refresh()
    _in_another_process(force_state, version, "READY")
    assert registry.resolve("late", None).number == 1  # no default version in the snapshot

    m.write_model(repo, "late", m.identity("UINT8"), version=2)
    _in_another_process(import_repository, repo)
    assert registry.version("late", "2").number == 2
    _in_another_process(routes.label_set, model=RegisteredModel.objects.get(name="late"), name="stable", number=1)
    assert registry.label("late", "stable") == "1"


def test_a_miss_costs_one_stamp_read_and_none_on_an_event_loop(repo):

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    registry = ModelRegistry(StoreRegistrySource(), poll_seconds=0, miss_seconds=0)
    registry.refresh(force=True)
    with CaptureQueriesContext(connection) as queries:
        for call in (lambda: registry.model("nope"), lambda: registry.version("simple", "9")):
            with pytest.raises(ModelNotFound):
                call()
        with pytest.raises(ModelNotReady, match="FAILED"):
            registry.resolve("broken", None)
    assert len(queries) == 3  # the stamp, once per miss; it did not move

    m.write_model(repo, "late", m.identity("INT8"))
    _in_another_process(import_repository, repo)

    async def on_the_loop():  # a query here would raise SynchronousOnlyOperation
        return registry.model("late").name

    answers = []  # a thread of its own: other tests (Playwright) may leave a loop running in this one
    thread = threading.Thread(target=lambda: answers.append(asyncio.run(on_the_loop())))
    thread.start()
    thread.join(30)
    assert answers == ["late"]  # the catch-up ran in a helper thread
    assert registry.catch_up() is False


def test_misses_that_wait_share_one_stamp_read(repo):
    """Misses arriving while a stamp read is under way wait for it and then
    share one more read (a write may have answered after the first began):
    a flood of unknown names costs about two reads per read's duration."""
    import threading
    import time

    reads = []

    class SlowStamp(StoreRegistrySource):
        def stamp(self):
            reads.append(threading.get_ident())
            time.sleep(0.2)
            return super().stamp()  # unchanged: nothing is rebuilt

    registry = ModelRegistry(SlowStamp(), poll_seconds=0, miss_seconds=0)
    registry.refresh(force=True)
    reads.clear()

    def miss():
        with pytest.raises(ModelNotFound):
            registry.model("nope")

    first = threading.Thread(target=miss)
    first.start()
    time.sleep(0.05)  # the first read is under way
    waiting = [threading.Thread(target=miss) for _ in range(5)]
    for thread in waiting:
        thread.start()
    for thread in (first, *waiting):
        thread.join()
    assert len(reads) == 2


def test_a_flood_of_misses_reads_the_stamp_once_per_miss_interval(repo):
    """Negative lookups answer from the snapshot between stamp reads: 200
    unknown names within one interval cost one query, not 200."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    registry = ModelRegistry(StoreRegistrySource(), poll_seconds=0, miss_seconds=5.0)
    registry.refresh(force=True)
    with CaptureQueriesContext(connection) as queries:
        for i in range(200):
            with pytest.raises(ModelNotFound):
                registry.model(f"made-up-{i}")
    assert len(queries) == 1
