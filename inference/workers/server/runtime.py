"""The inference worker's runtime: what ``manage.py runworker --device D`` serves.

One process per device. Front ends connect to its
:class:`~inference.workers.server.socket_server.WorkerServer`; each request names a
model version (model, version, sha256), which the worker resolves in its own
registry snapshot (it follows the registry like every server process: the
artifact comes from the registry, never from the request) and runs on its
:class:`~inference.runtime.runner.ModelRunner`: sessions created with the
device's execution provider (CUDA with ``device_id`` for ``cuda:<n>``),
``count`` instances per the model's instance group on this device, dynamic
batching, deadlines, the memory budget (``WORKER_MEMORY_BUDGET_MB``).
Artifacts are copied from the model store into ``WORKER_CACHE_DIR/<sha256>/``
once per machine (and dropped from it when their version leaves the
registry: the composition root adds the cache's janitor as a registry
listener). Its :class:`BusyMeter` measures how busy it is, for its heartbeat.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from inference import runtime_settings
from inference.observability import tracing
from inference.protocol.errors import InferenceError, InvalidInput, ModelNotReady
from inference.runtime import cuda
from inference.runtime.execution import RunTarget
from inference.runtime.executors import always_loaded, runnable
from inference.runtime.queue_policy import Schedule
from inference.runtime.runner import ModelRunner
from inference.runtime.sequences.policy import SequenceRequest
from inference.serving.instance_groups import allowed_devices, instances_on
from inference.serving.registry import ModelRegistry
from inference.shared_memory import region_tensors
from inference.workers import frames, messages
from inference.workers.placement import device_name, queue_for
from inference.workers.server import segments as worker_segments

logger = logging.getLogger(__name__)

#: How long a shadow copy waits on a worker for the worker to run no other request (s): by default as long as
#: a copy waits for idle time in a front end (SHADOW_WAIT_MS); beyond, it is not run but answered QUEUE_FULL,
#: which the front end counts ``busy`` (inference/shadow/traffic.py).
SHADOW_WAIT_SECONDS = 0.05  # = shadow/traffic.py's YIELD_MAX_SECONDS; not imported: it reaches the link's client end
#: The niceness of the thread that runs the shadow copies' models (Linux: per thread): a live request's run
#: that arrives meanwhile comes first for the CPU.
SHADOW_NICENESS = 19


class BusyMeter:
    """How busy a worker is: the share of the model instances of the
    versions it is running that are in use (requests in flight for a
    version, at most its instance count, over those instances; 0 when idle,
    1 when every instance of every running version is taken), averaged over
    time. :meth:`fraction` gives the average over the last ``window``
    seconds (the heartbeat reports it every second). Thread-safe."""

    def __init__(self, window: float = 10.0, clock=time.monotonic):
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._inflight: dict[tuple, int] = {}
        self._instances: dict[tuple, int] = {}
        self._value = 0.0
        self._last = clock()
        self._area = 0.0  # integral of the value over time since the start (s)
        self._checkpoints: deque = deque([(self._last, 0.0)])

    def _advance(self, now: float) -> None:
        self._area += self._value * (now - self._last)
        self._last = now

    def _recompute(self) -> None:
        used = sum(min(n, self._instances[key]) for key, n in self._inflight.items())
        slots = sum(self._instances[key] for key in self._inflight)
        self._value = used / slots if slots else 0.0

    def begin(self, key: tuple, instances: int) -> None:
        """A request for version ``key`` (run with ``instances`` instances) starts."""
        with self._lock:
            self._advance(self._clock())
            self._inflight[key] = self._inflight.get(key, 0) + 1
            self._instances[key] = max(1, instances)
            self._recompute()

    def end(self, key: tuple) -> None:
        """A request for version ``key`` ended (answered or failed)."""
        with self._lock:
            self._advance(self._clock())
            left = self._inflight.get(key, 0) - 1
            if left > 0:
                self._inflight[key] = left
            else:
                self._inflight.pop(key, None)
                self._instances.pop(key, None)
            self._recompute()

    def fraction(self) -> float:
        """The busy fraction averaged over the last ``window`` seconds (0..1)."""
        with self._lock:
            now = self._clock()
            self._advance(now)
            self._checkpoints.append((now, self._area))
            while len(self._checkpoints) > 2 and self._checkpoints[1][0] <= now - self.window:
                self._checkpoints.popleft()
            since, area = self._checkpoints[0]
            if now - since <= 0:
                return self._value
            return min(1.0, max(0.0, (self._area - area) / (now - since)))


class WorkerRuntime:
    """Answers the front ends' requests for one device (``handle``)."""

    def __init__(
        self, device: str, runner: ModelRunner, registry: ModelRegistry, cpu_instances: int = 1,
        always: tuple[str, ...] = (), shadow_wait_seconds: float = SHADOW_WAIT_SECONDS,
    ):  # fmt: skip
        """``cpu_instances``: model instances of a model without an instance
        group on a CPU worker (:func:`inference.serving.instance_groups.cpu_instances`);
        ``always``: name patterns of the models whose sessions stay loaded
        (:func:`inference.runtime.executors.always_loaded`); ``shadow_wait_seconds``: how long a shadow copy
        waits for the worker to run no other request (SHADOW_WAIT_MS)."""
        self.always = tuple(always)
        self.shadow_wait_seconds = shadow_wait_seconds
        self.device = device
        self.cpu_instances = cpu_instances
        self.queue = queue_for(device)
        self.runner = runner
        self.registry = registry
        self.meter = BusyMeter()
        self._targets: dict[tuple, RunTarget] = {}
        self._draining: dict[tuple, tuple[RunTarget, float]] = {}  # key -> (target, until: time.monotonic())
        #: Called once with the reason when a CUDA error persists (runworker: leave the directory, exit non-zero).
        self.on_device_failed = None
        self._failed = threading.Event()
        self._live = 0  # requests being handled, shadow copies aside (under _quiet)
        self._quiet = threading.Condition(threading.Lock())  # notified when _live falls to 0
        self._shadow_lane = threading.Lock()  # one shadow copy at a time
        self._shadow_runs = None  # the niced thread that runs the copies' models (started on the first)

    def device_failed(self, reason: str) -> None:
        """A CUDA error that persists (:class:`~inference.runtime.cuda.DeviceFailed`):
        logged, and ``on_device_failed(reason)`` called once, so that the
        worker leaves the directory and exits for its orchestrator to restart it."""
        if self._failed.is_set():
            return
        self._failed.set()
        logger.critical("%s worker: %s", self.device, reason)
        if self.on_device_failed is not None:
            self.on_device_failed(reason)

    def on_snapshot(self, snapshot: dict) -> None:
        """Registry listener: the versions this worker may run, with this
        device's instance count. A version that stops serving keeps running
        for the runner's ``drain_seconds`` (front ends that have not seen
        the change yet still route to it: a rollout fails no request);
        its sessions are dropped after. Always-loaded versions that may run
        on this device load (the first snapshot's before this returns)."""
        targets, here = {}, []
        device = device_name(self.device)
        for model, version in runnable(snapshot):
            instances = instances_on(device, model.instance_group, self.cpu_instances)
            targets[version.key] = dataclasses.replace(version.target, instances=instances)
            if device in allowed_devices(model.instance_group, {device}):
                here.append(targets[version.key])
        now = time.monotonic()
        until = now + self.runner.drain_seconds
        draining = {k: v for k, v in self._draining.items() if v[1] > now and k not in targets}
        draining.update({k: (t, until) for k, t in self._targets.items() if k not in targets})
        self._targets, self._draining = targets, draining
        self.runner.retain(set(targets))
        self.runner.keep_loaded(always_loaded(here, self.always))

    def target(self, model: str, version: int, sha256: str) -> RunTarget:
        """The run target of a version this worker serves; raises ModelNotReady."""
        key = (model, version, sha256)
        self.registry.models  # noqa: B018  (follows the machine's change beacon first)
        target = self._targets.get(key)
        if target is None and self.registry.catch_up():
            target = self._targets.get(key)
        if target is None:
            target, until = self._draining.get(key, (None, 0.0))
            target = target if until > time.monotonic() else None
        if target is None:
            raise ModelNotReady(
                f"version {version} of model '{model}' does not serve on the {self.device} worker "
                "(deleted, retired or unloaded meanwhile)"
            )
        return target

    def handle(self, request: messages.RunRequest, body, shared: frames.SharedBuffer | None = None) -> list:
        """Run one request (its tensors in the frame ``body``, or in the
        connection's ``shared`` memory); the answer frame's buffers
        (:class:`~messages.RunAnswer` with the outputs, or
        :class:`~messages.ErrorAnswer`; a :class:`~messages.SegmentRequest`:
        :mod:`inference.workers.server.segments`). A shadow copy
        (``request.shadow``) runs only while no other request is being
        handled here, one copy at a time: it waits for that at most
        :data:`SHADOW_WAIT_SECONDS`, else is answered QUEUE_FULL unrun (a
        request that arrives while a copy runs is not held back by it beyond
        sharing the CPU)."""
        if getattr(request, "shadow", False):
            return self._shadow(request, body, shared)
        with self._quiet:
            self._live += 1
        try:
            return self._answer(request, body, shared)
        finally:
            with self._quiet:
                self._live -= 1
                if not self._live:
                    self._quiet.notify_all()

    def _shadow(self, request: messages.RunRequest, body, shared) -> list:
        """A shadow copy: run once the worker handles no other request (see :meth:`handle`)."""
        deadline = time.monotonic() + self.shadow_wait_seconds
        if not self._shadow_lane.acquire(timeout=self.shadow_wait_seconds):
            return _busy()
        try:
            with self._quiet:
                if not self._quiet.wait_for(lambda: not self._live, deadline - time.monotonic()):
                    return _busy()
            return self._answer(request, body, shared, self._run_niced)
        finally:
            self._shadow_lane.release()

    def _run_niced(self, *args):
        """``runner.run(*args)`` in the niced shadow thread (a copy's model run yields the CPU to live runs)."""
        if self._shadow_runs is None:
            self._shadow_runs = ThreadPoolExecutor(1, "worker-shadow", initializer=_nice)
        return self._shadow_runs.submit(self.runner.run, *args).result()

    def _answer(self, request: messages.RunRequest, body, shared, run=None) -> list:
        """:meth:`handle`'s answer, the model run by ``run`` (None: the runner, in this thread)."""
        try:
            runtime_settings.follow()  # the machine's trace and log settings (one memory read)
            if tracing.ENABLED and request.traceparent:
                with tracing.remote_span(f"worker {self.device}", request.traceparent, device=self.device):
                    return self._handle(request, body, shared, run)
            return self._handle(request, body, shared, run)
        except cuda.DeviceFailed as exc:  # the GPU context is lost: every later run would fail too
            self.device_failed(exc.message)
            return frames.encode(messages.ErrorAnswer(exc.code, exc.message))
        except InferenceError as exc:
            return frames.encode(messages.ErrorAnswer(exc.code, exc.message))
        except Exception as exc:  # never leave the front end waiting
            logger.exception("inference failed on %s", self.device)
            return frames.encode(messages.ErrorAnswer("INTERNAL", f"the worker failed: {type(exc).__name__}"))

    def _handle(self, request: messages.RunRequest, body, shared, run=None) -> list:
        if isinstance(request, messages.SegmentRequest):  # consecutive steps of an ensemble
            return worker_segments.run(self, request, body, shared)
        target = self.target(request.model, request.version, request.sha256)
        feeds = frames.tensors(request, body, "request", shared)
        for tensor in request.regions:  # inputs in clients' shared-memory regions: read here (one copy, no mapping)
            span = region_tensors.ObjectSpan(tensor.key, tensor.offset, tensor.nbytes)
            buffer = region_tensors.read_span(span, f"input '{tensor.name}'")
            feeds[tensor.name] = frames.tensor_in(buffer, 0, tensor, "request region")
        deadline = time.monotonic() + (request.deadline - time.time())
        names = request.outputs
        asked = tracing.epoch_ns() if tracing.ENABLED else 0
        given = request.sequence
        sequence = SequenceRequest(given.corrid, given.start, given.end, given.owner) if given else None
        schedule = Schedule(request.priority, request.timeout_us) if request.priority or request.timeout_us else None
        self.meter.begin(target.key, target.instances)
        try:
            result = (run or self.runner.run)(target, feeds, names, request.rows, deadline, sequence, schedule)
        finally:
            self.meter.end(target.key)
        if asked:
            tracing.record_run(asked, result.queue_ns, result.form_ns, result.infer_ns, result.batch_size)
        answer = messages.RunAnswer(
            result.batch_size, bool(result.executed), max(0, result.queue_ns), max(0, result.infer_ns)
        )
        outputs = list(zip(names, result.outputs))
        if request.output_regions:
            answer.written = _write_regions(request.output_regions, dict(outputs))
            done = {entry.name for entry in answer.written}
            outputs = [(name, array) for name, array in outputs if name not in done]
        return frames.encode(answer, outputs)


def _nice() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SHADOW_NICENESS)
    except (OSError, AttributeError):
        pass


def _busy() -> list:
    """The answer to a shadow copy not run: the worker kept running other requests."""
    return frames.encode(messages.ErrorAnswer("QUEUE_FULL", "a shadow copy: the worker is running other requests"))


def _write_regions(regions: list[messages.RegionTensor], outputs: dict) -> list[messages.TensorInfo]:
    """Write outputs into the clients' shared-memory regions the request
    names (here, with ``pwrite``: never mapped); their descriptions (offset:
    the object's, nbytes: the bytes written). Raises InvalidInput (Triton's
    text) for a region too small for its output, or one that shrank."""
    written = []
    for region in regions:
        array = outputs.get(region.name)
        if array is None:
            raise InvalidInput(f"output '{region.name}' of a shared-memory region was not requested")
        kind, data = frames.tensor_bytes(array)
        size = memoryview(data).nbytes
        region_tensors.check_room(region.name, region.nbytes, size)
        if size:
            span = region_tensors.ObjectSpan(region.key, region.offset, size)
            region_tensors.open_span(span, f"output '{region.name}'").write(data)
        written.append(messages.TensorInfo(region.name, kind, list(array.shape), region.offset, size))
    return written
