"""The transport-agnostic data plane of the Open Inference Protocol (V2):
health, metadata, the version lookups and inference.

REST, gRPC and TF Serving adapters decode their wire format into protocol
types, call a :class:`DataPlane` method, and encode what it returns. The data
plane admits callers (:mod:`inference.admission.caller`), resolves versions through
the in-memory :class:`~inference.serving.registry.ModelRegistry`, checks requests
(:mod:`inference.requests.jobs`, :mod:`inference.requests.checks`), runs the model
through an executor, and counts statistics. It raises only protocol errors
(:mod:`inference.protocol.errors`). Triton's other extensions are
:mod:`inference.extensions`.

Spec: the Open Inference Protocol ("Health", "Server Metadata", "Model
Metadata", "Inference"; REST https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md,
gRPC https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from typing import cast

from inference import response_cache, runtime_settings
from inference.admission import caller as admissions
from inference.admission import fair_share
from inference.admission.caller import Admission
from inference.admission.ratelimit import Defaults, RateLimiter
from inference.ensembles import runs as ensemble_runs
from inference.ensembles.segments import SegmentRunner
from inference.executor import Executor, WorkerExecutor
from inference.observability import metrics as observability
from inference.observability import tracing
from inference.observability.statistics import StatisticsRecorder, failure_reason
from inference.ports import built_once
from inference.protocol.errors import InferenceError, InvalidInput, ModelNotFound, ModelNotReady, QueueFull
from inference.protocol.types import InferenceRequest, InferenceResponse, ModelMetadata, ServerMetadata
from inference.requests import checks as request_checks
from inference.requests import jobs
from inference.runtime.sequences import policy as sequences
from inference.serving.registry import ModelRegistry
from inference.serving.snapshot import VersionEntry
from inference.shadow.traffic import ShadowSettings, ShadowTraffic
from inference.shared_memory import regions as shm

#: Extensions this server implements, exactly, as listed in server metadata.
EXTENSIONS = (
    "binary_tensor_data", "classification", "sequence", "sequence(string_id)", "model_repository",
    "model_repository(unload_dependents)", "model_configuration", "statistics", "parameters", "trace", "logging",
    "system_shared_memory", "schedule_policy",
)  # fmt: skip

_now = time.perf_counter_ns
#: An ensemble of at most this many steps may run inline on the gRPC event loop (see _ensemble_async).
INLINE_ENSEMBLE_STEPS = 4
#: What an inference's steps wait for (:meth:`DataPlane._steps`): its flow's turn at the version's seats, the run.
_TURN, _RUN = "turn", "run"


class DataPlane:
    """Health, metadata, lookups and inference over a registry and an
    executor: the door of the REST, gRPC and TF Serving adapters.

    ``executor`` runs a version's model (:class:`~inference.executor.Executor`:
    in process, the model runner; worker mode, the remote executor, which
    can also await a run on an event loop and run ensemble segments).
    """

    def __init__(self, registry: ModelRegistry, executor: Executor, server_name: str, server_version: str,
                 statistics: StatisticsRecorder | None = None, timeout_seconds: float = 0.0,
                 limiter: RateLimiter | None = None, payload_log=None, shared_memory: shm.RegionRegistry | None = None,
                 cache: response_cache.ResponseCache | None = None,
                 fair: fair_share.FairShare | None = None, shadow: ShadowSettings | None = None):  # fmt: skip
        self.registry = registry
        self.executor = executor
        self.response_cache = cache  # for models whose config enables it (inference/response_cache.py)
        #: The executor's worker calls (worker mode): a run awaited on an event loop, no thread per request.
        self._remote = cast(WorkerExecutor, executor) if executor.remote else None
        self.limiter = limiter or RateLimiter(Defaults())
        self.payload_log = payload_log  # a PayloadLogger (inference/observability/payload_log.py), or None
        self.statistics = statistics or StatisticsRecorder(flush_seconds=0)
        self.timeout_seconds = timeout_seconds
        #: The machine's registered shared-memory regions (inference/shared_memory/regions.py).
        self.shared_memory = shared_memory or shm.RegionRegistry()
        self._metadata = ServerMetadata(server_name, server_version, EXTENSIONS)
        #: Fair admission to each version's instances, per flow (inference/admission/fair_share.py).
        self.fair = fair or fair_share.FairShare(queue_per_flow=16, seats=executor.seats)
        self._lag: fair_share.LoopLag | None = None  # the gRPC event loop's (infer_async)
        self._begins, self._ends = itertools.count(1), itertools.count(1)
        #: Callers admitted and done (their requests decoded, run, answered): shadow copies wait for none.
        self._admits, self._dones = itertools.count(1), itertools.count(1)
        self._admitted = self._done = 0
        self._began = self._ended = 0
        #: Copies of requests run on a model's shadow version after the live answer (inference/shadow/traffic.py).
        self.shadows = ShadowTraffic(
            shadow or ShadowSettings(), executor, self.fair, self.statistics, self.shared_memory, timeout_seconds,
            live=self._live, began=self._last_began,
        )  # fmt: skip
        segments = None
        if self._remote is not None:  # consecutive steps of an ensemble on one worker
            segments = SegmentRunner(
                executor=self._remote, fair=self.fair, statistics=self.statistics, response_cache=cache is not None
            )
        self._ensembles = ensemble_runs.EnsembleRuns(
            registry=registry, executor=executor, statistics=self.statistics, payload_log=payload_log,
            regions=self.shared_memory, timeout_seconds=timeout_seconds, segments=segments, step=self.infer,
        )  # fmt: skip

    # -- health and metadata --------------------------------------------
    def live(self) -> bool:
        """True while the process can answer requests."""
        return True

    def ready(self) -> bool:
        """True once the registry snapshot is loaded (a failed model does not make the server unready)."""
        return self.registry.loaded

    def server_metadata(self) -> ServerMetadata:
        return self._metadata

    def knows(self, name: str) -> bool:
        """Whether a model of this name exists (for metrics labels; never queries)."""
        return name in self.registry.models

    def resolve(self, name: str, version: str | None = None) -> VersionEntry:
        """The version that serves a request for ``name`` (``version`` None:
        the default version). Raises ModelNotFound, ModelNotReady (with the
        version's state and reason)."""
        return self.registry.resolve(name, version)

    def route(self, name: str, version: str | None = None) -> VersionEntry:
        """The version that runs an inference request for ``name``: the named
        one, or, when ``version`` is None, the one the model's traffic split
        draws (by weight; the default version without a split). Requests
        naming a version or a label are never split. Raises like
        :meth:`resolve`."""
        return self.registry.route(name, version)

    def splits_traffic(self, name: str) -> bool:
        """Whether a traffic split draws the version of a request to ``name``
        that names none (TF Serving's answers then name the version drawn)."""
        model = self.registry.models.get(name)
        return model is not None and bool(model.split)

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether the version (default: the default version) can serve.
        Raises ModelNotFound for an unknown model or version."""
        try:
            self.registry.resolve(name, version)
        except ModelNotReady:
            return False
        return True

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata:
        """Metadata of a version (default: the default version); ``versions``
        lists the served versions. Raises ModelNotFound / ModelNotReady."""
        return self.registry.metadata(name, version)

    def version_for_label(self, name: str, label: str) -> str:
        """The version a version label points at (TF Serving's ``/labels/``). Raises ModelNotFound for an
        unknown model, InvalidInput for an unknown label (TF Serving's "Unrecognized servable version label")."""
        try:
            return self.registry.label(name, label)
        except ModelNotFound:
            self.registry.model(name)  # an unknown model stays NOT_FOUND
            raise InvalidInput(f"Unrecognized servable version label: {label}") from None

    def model_versions(self, name: str) -> list[VersionEntry]:
        """Every version of a model in the registry, highest first, whatever
        its state (for status endpoints). Raises ModelNotFound."""
        model = self.registry.model(name)
        return [model.versions[n] for n in sorted(model.versions, reverse=True)]

    # -- inference -------------------------------------------------------
    def admit(self, token: str | None, name: str) -> Admission:
        """The caller's :class:`~inference.admission.caller.Admission` to ``name``
        (:func:`inference.admission.caller.admit`), which :meth:`infer` takes: hold it
        while the request is decoded and run (``with``; leaving it frees the
        in-flight slots). Adapters admit before they decode any tensor. Raises
        Unauthenticated, PermissionDenied, RateLimited."""
        admission = admissions.admit(self.registry, self.limiter, token, name)
        self._admitted = next(self._admits)  # a request under way: shadow copies wait until it is done
        admission.done = self._admission_done
        return admission

    def _admission_done(self) -> None:
        self._done = next(self._dones)

    async def admit_async(self, token: str | None, name: str) -> Admission:
        """:meth:`admit` from an event loop: inline when it cannot block, in a
        thread when it may. Hold the result with ``async with``."""
        if admissions.may_block(self.limiter, token, name):
            return await asyncio.to_thread(self.admit, token, name)  # may reload token scopes, ask Redis
        return self.admit(token, name)

    def infer(
        self, admission: Admission, request: InferenceRequest, version: VersionEntry | None = None,
        seated: bool = False, started: int | None = None,
    ) -> InferenceResponse:  # fmt: skip
        """Run ``request`` on the resolved model version (``version``, when the adapter resolved it already
        for this request) for a caller ``admission`` (:meth:`admit`) admitted to its model, once checked
        (:mod:`inference.requests.checks`, :mod:`inference.requests.jobs`), when its flow's turn at the version's
        seats comes (:mod:`inference.admission.fair_share`; ``seated``: the caller checked the admission, routed
        the request to ``version`` and took the seat already;
        ``started``: when the request arrived, ``time.perf_counter_ns()``, if it waited for that seat already:
        its deadline counts from then). Outputs
        requested with ``classification: N`` come back as their top N (Triton's classification extension).
        An ensemble's version runs its graph (:mod:`inference.ensembles.runs`), each step taking its turn.
        Raises PermissionDenied (an admission to another model), InvalidInput, ModelNotFound, ModelNotReady,
        DeadlineExceeded, RateLimited (its flow has too many requests waiting)."""
        self._began = next(self._begins)  # live requests in this data plane: shadow copies yield to them
        try:
            return self._infer(admission, request, version, seated, started)
        finally:
            self._ended = next(self._ends)

    def _infer(
        self, admission: Admission, request: InferenceRequest, version: VersionEntry | None, seated: bool,
        started: int | None,
    ):  # fmt: skip
        started = _now() if started is None else started
        runtime_settings.follow()  # the machine's trace and log settings (one memory read)
        if seated:  # from infer_async, which checked and routed it
            entry = version
        else:
            admission.check(request)
            entry = self._route(admission, request, version)
        if entry.ensemble is not None:  # a graph of other versions (inference/ensembles/runs.py)
            if seated:
                return self._ensembles.infer(admission, request, entry, started)
            gate = self.fair.ensemble_gate(entry)
            gate.enter(admission.flow, request_checks.deadline(request.parameters, started, self.timeout_seconds))
            try:
                return self._ensembles.infer(admission, request, entry, started)
            finally:
                gate.leave()
        gate = None if seated else self.fair.gate(entry.target, entry.instance_group)
        steps = self._steps(admission, request, entry, started, gate)
        try:
            need, job = steps.send(None)
            while True:  # each wait in this thread
                try:
                    if need is _TURN:
                        value = gate.enter(admission.flow, job.deadline)
                    elif tracing.ENABLED and tracing.recording():
                        value = tracing.traced_run(self.executor, entry, job)
                    else:
                        value = self.executor.run(
                            entry.target, job.feeds, job.names, job.rows, job.deadline, entry.instance_group,
                            **job.options,
                        )  # fmt: skip
                except BaseException as exc:
                    need, job = steps.throw(exc)
                else:
                    need, job = steps.send(value)
        except StopIteration as done:
            return done.value

    async def infer_async(self, admission: Admission, request: InferenceRequest) -> InferenceResponse:
        """:meth:`infer` from an event loop (``admission`` from
        :meth:`admit_async`): inline when that cannot block (in process, no
        batching), a seat is free and the loop keeps up; else the request
        waits for its turn on the loop (:mod:`inference.admission.fair_share`) and runs
        in a thread or, in worker mode, on the loop (``run_async``: the worker
        transport's sockets in the loop's selector, no thread per request).
        An InferenceError raised after the version was found carries it in ``served_version``
        (the adapter's metrics label it, as REST's do)."""
        admission.check(request)
        entry = self._route(admission, request)
        try:
            return await self._infer_routed(admission, request, entry)
        except InferenceError as exc:
            exc.served_version = entry.version
            raise

    async def _infer_routed(self, admission: Admission, request: InferenceRequest, entry: VersionEntry):
        behind = self._behind()
        if entry.ensemble is not None:
            return await self._ensemble_async(admission, request, entry, behind)
        gate = self.fair.gate(entry.target, entry.instance_group)
        if not self.executor.blocks(entry.target):
            if not behind and (gate is None or gate.try_enter()):
                try:
                    return self.infer(admission, request, entry, seated=True)
                finally:
                    if gate is not None:
                        gate.leave()
        elif self._remote is not None and not (tracing.ENABLED and tracing.recording()):
            return await self._infer_on_loop(admission, request, entry, gate)
        if gate is None:
            return await asyncio.to_thread(self.infer, admission, request, entry)
        started = _now()  # the run's deadline counts from here, not from after the wait
        await gate.enter_async(
            admission.flow, request_checks.deadline(request.parameters, started, self.timeout_seconds)
        )
        try:
            return await asyncio.to_thread(self.infer, admission, request, entry, True, started)
        finally:
            gate.leave()

    async def _ensemble_async(self, admission: Admission, request: InferenceRequest, entry: VersionEntry, behind):
        """An ensemble's request from an event loop: a few steps that cannot
        wait run inline while the loop keeps up and the ensemble's seats are
        free; else it waits for its turn at them on the loop
        (:meth:`~inference.admission.fair_share.FairShare.ensemble_gate`) and runs in a
        thread, so a long graph never holds the loop."""
        gate = self.fair.ensemble_gate(entry)
        if (
            not behind
            and len(entry.ensemble.steps) <= INLINE_ENSEMBLE_STEPS
            and not self._ensembles.blocks(entry, admission)
            and gate.try_enter()
        ):
            try:
                return self.infer(admission, request, entry, seated=True)
            finally:
                gate.leave()
        started = _now()  # the graph's deadline counts from here, not from after the wait
        await gate.enter_async(
            admission.flow, request_checks.deadline(request.parameters, started, self.timeout_seconds)
        )
        try:
            return await asyncio.to_thread(self.infer, admission, request, entry, True, started)
        finally:
            gate.leave()

    async def _infer_on_loop(self, admission: Admission, request: InferenceRequest, entry: VersionEntry, gate):
        """:meth:`infer`'s steps in worker mode on the event loop: the turn and
        the worker's answer awaited in the loop."""
        started = _now()
        runtime_settings.follow()
        steps = self._steps(admission, request, entry, started, gate)
        self._began = next(self._begins)
        try:
            need, job = steps.send(None)
            while True:  # each wait awaited on the loop
                try:
                    if need is _TURN:
                        value = await gate.enter_async(admission.flow, job.deadline)
                    else:
                        value = await self._remote.run_async(
                            entry.target, job.feeds, job.names, job.rows, job.deadline, entry.instance_group,
                            **job.options,
                        )  # fmt: skip
                except BaseException as exc:  # cancelled too: the steps give the seat back
                    need, job = steps.throw(exc)
                else:
                    need, job = steps.send(value)
        except StopIteration as done:
            return done.value
        finally:
            self._ended = next(self._ends)

    def _live(self) -> bool:
        """Whether a live request is under way in this data plane: admitted and not done (decoded, run,
        answered), or inside :meth:`infer` (counters, one store each per request; a race may misjudge a
        moment, never for long, and the shadow threads bound how long they wait)."""
        return self._began != self._ended or self._admitted != self._done

    def _last_began(self) -> int:
        """A number that changes whenever a live request begins (is admitted, or runs): a shadow copy
        waits for it to stay the same for a quiet spell."""
        return self._began + self._admitted

    def _steps(self, admission: Admission, request: InferenceRequest, entry: VersionEntry, started: int, gate):
        """The one body of an inference, driven by :meth:`infer` (in a thread)
        and :meth:`_infer_on_loop` (on an event loop): the checked job
        (:func:`inference.requests.jobs.prepare`), the response cache, the flow's turn
        at ``gate`` (None: not gated, or seated already), the run, the
        response (:func:`inference.requests.jobs.respond`), a failure counted. A
        generator of its waits: it yields ``(_TURN, job)`` and ``(_RUN,
        job)``; the driver sends back the run's result, or throws in what
        the wait raised; it returns the response."""
        running = waiting = False  # in the model's run; waiting for the turn (Triton's pending requests)
        try:
            job = jobs.prepare(entry, request, started, admission.owner, admission.regions, self.timeout_seconds,
                               self.shared_memory, self.executor.remote)  # fmt: skip
            cached = response_cache.lookup(self.response_cache, entry, request, job)
            if isinstance(cached, response_cache.CachedRun):
                return self._respond(entry, request, job, cached)
            pending = observability.pending(entry.model_name, entry.version)  # its series from the first request
            if gate is not None:
                if gate.free <= 0 or gate.waiting:  # it will wait for a seat (a free one costs no gauge write)
                    pending.inc()
                    waiting = True
                yield _TURN, job
                if waiting:
                    waiting = False
                    pending.dec()
            try:
                running = True
                run = yield _RUN, job
                running = False
            finally:
                if gate is not None:
                    gate.leave()
            return self._respond(entry, request, job, run, cached)
        except QueueFull:
            raise  # refused before it queued: not a failed inference (as Triton counts)
        except (InferenceError, asyncio.CancelledError) as exc:  # cancelled: a gRPC call cancelled on the loop
            reason = failure_reason(exc, running)
            self.statistics.record_failure(entry.model_name, entry.number, _now() - started, reason)
            raise
        finally:
            if waiting:
                pending.dec()

    def _behind(self) -> bool:
        """Whether the running event loop is behind (:class:`~inference.admission.fair_share.LoopLag`)."""
        loop, lag = asyncio.get_running_loop(), self._lag
        if lag is None or lag.loop is not loop:
            lag = self._lag = fair_share.LoopLag(loop)
        return lag.behind()

    def _route(self, admission: Admission, request: InferenceRequest, version: VersionEntry | None = None):
        """The request's version: ``version`` when the adapter resolved it, unless the request
        names no version and belongs to a sequence: then the traffic split (if any) draws it by
        the sequence, so that all of a sequence goes to one version."""
        draw = sequences.split_draw(request.parameters, admission.owner)
        if version is not None and (draw is None or request.model_version):
            return version
        return self.registry.route(request.model_name, request.model_version, draw)

    def _respond(self, entry: VersionEntry, request: InferenceRequest, job: jobs.Job, run, cached=None):
        """The response of a finished run (:func:`inference.requests.jobs.respond`),
        kept in the response cache under ``cached`` when that is a key."""
        if cached is not None:
            response_cache.keep(self.response_cache, self.statistics, entry, cached, run)
        response = jobs.respond(entry, request, job, run, self.statistics, self.payload_log)
        if entry.shadow is not None:
            self._shadow(entry, request, job, run)
        return response

    def _shadow(self, entry: VersionEntry, request: InferenceRequest, job: jobs.Job, run) -> None:
        """Offer a copy of an answered request to the model's shadow version (its share of requests
        drawn; never a request of a sequence or with tensors in shared-memory regions): queued, never
        waited for (:mod:`inference.shadow.traffic`)."""
        share, shadow = entry.shadow
        if job.sequence is not None or job.regions is not None or job.plan is not None:
            return
        if share < 1.0 and random.random() >= share:
            return
        self.shadows.offer(entry, shadow, request, job.names, run.outputs)


#: The process-wide DataPlane (``get_dataplane()``), built on first use by the
#: factory the composition root installed (``container.dataplane_factory``).
get_dataplane: Callable[[], DataPlane] = built_once("dataplane_factory", "data plane")
