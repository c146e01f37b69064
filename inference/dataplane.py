"""The transport-agnostic data plane of the Open Inference Protocol (V2).

REST, gRPC and TF Serving adapters decode their wire format into protocol
types, call a :class:`DataPlane` method, and encode what it returns. The data
plane checks requests against the model's signature, resolves versions
through the in-memory :class:`~inference.registry.ModelRegistry`, runs the
model through an executor, and counts statistics. It raises only protocol
errors (:mod:`inference.protocol.errors`).

Spec: the Open Inference Protocol ("Health", "Server Metadata", "Model
Metadata", "Inference"; REST https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md,
gRPC https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md)
and Triton's extensions (classification, model repository, model
configuration, statistics, parameters, system shared memory:
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_<name>.md).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field

from inference import auth, classification, model_config, ratelimit, response_cache, tracing
from inference import shared_memory as shm
from inference.ports import container
from inference.protocol import triton_texts
from inference.protocol.errors import InferenceError, InvalidInput, ModelNotFound, ModelNotReady, PermissionDenied
from inference.protocol.types import (
    InferenceRequest,
    InferenceResponse,
    MetadataTensor,
    ModelMetadata,
    ResponseOutput,
    ServerMetadata,
)
from inference.ratelimit import Defaults, RateLimiter
from inference.registry import ModelEntry, ModelRegistry, VersionEntry, parse_version
from inference.runtime import sequences
from inference.statistics import ModelStatistics, StatisticsRecorder

#: Extensions this server implements, exactly, as listed in server metadata.
EXTENSIONS = (
    "binary_tensor_data",
    "classification",
    "sequence",
    "sequence(string_id)",
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "statistics",
    "parameters",
    "trace",
    "logging",
    "system_shared_memory",
)

#: Reserved names Triton accepts (gRPC clients such as perf_analyzer send it); ignored here.
ALLOWED_RESERVED = frozenset({"triton_enable_empty_final_response"})

_now = time.perf_counter_ns


@dataclass(slots=True)
class _Job:
    """One checked request on its way through :meth:`DataPlane.infer`:
    times in ``perf_counter_ns``, the deadline on ``time.monotonic()``."""

    started: int
    deadline: float | None
    feeds: dict
    rows: int
    names: list
    classify: dict
    computed: int
    sequence: sequences.SequenceRequest | None = None
    regions: dict | None = None  # output name -> (TensorReference, the region's view it is written into)
    plan: shm.RegionPlan | None = None  # for a remote executor: tensors its worker may map itself

    @property
    def options(self) -> dict:
        """The executor's keyword arguments beside the tensors."""
        if self.plan is None:
            return {"sequence": self.sequence}
        return {"sequence": self.sequence, "regions": self.plan}


class Admission:
    """A caller admitted to run an inference of ``model_name``
    (:meth:`DataPlane.admit`): its token checked and its call counted in its
    rate limits. :meth:`DataPlane.infer` takes it, so that no adapter runs an
    inference (or decodes a request's tensors) before the caller is admitted.
    Leaving its ``with`` block (``async with`` on an event loop) frees its
    in-flight slots. ``owner``: whose sequences its requests continue
    (:func:`inference.runtime.sequences.owner_of`); ``regions``: whose
    shared-memory regions they may use (:func:`inference.auth.region_owner`)."""

    __slots__ = ("_blocking", "_slots", "model_name", "owner", "regions")

    def __init__(self, model_name: str, slots: ratelimit.Admission, blocking: bool, owner: str = "", regions: str = ""):
        self.model_name = model_name
        self._slots = slots
        self._blocking = blocking  # releasing its slots talks to a shared store
        self.owner = owner
        self.regions = regions

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc) -> None:
        self._slots.release()

    async def __aenter__(self) -> Admission:
        return self

    async def __aexit__(self, *exc) -> None:
        if self._blocking and self._slots.holds:
            await asyncio.to_thread(self._slots.release)
        else:
            self._slots.release()


@dataclass(frozen=True)
class ServedVersion:
    """A model version as adapters see it: its signature and state.

    Returned by :meth:`DataPlane.resolve` and handed back to
    :meth:`DataPlane.infer` so that a request resolves its version once.
    """

    model_name: str
    number: int
    state: str  # the registry's: READY, FAILED, UNAVAILABLE, UPLOADED, VALIDATING
    reason: str  # why it does not serve ("" when it does)
    serving: bool
    inputs: tuple[MetadataTensor, ...]
    outputs: tuple[MetadataTensor, ...]
    max_batch_size: int
    class_labels: tuple[str, ...]  # for classification outputs (may be empty)
    _entry: VersionEntry = field(repr=False, compare=False)
    routed: bool = False  # drawn by the model's traffic split (the request named no version)

    @property
    def version(self) -> str:
        return str(self.number)


def _served(entry: VersionEntry, routed: bool = False) -> ServedVersion:
    return ServedVersion(
        entry.model_name, entry.number, entry.state, entry.reason, entry.serving, entry.inputs, entry.outputs,
        entry.max_batch_size, tuple(entry.properties.get("labels") or ()), entry, routed,
    )  # fmt: skip


@dataclass(frozen=True)
class IndexEntry:
    """One row of the model repository index (Triton's ``ModelIndex``)."""

    name: str
    version: str
    state: str  # READY, UNAVAILABLE, LOADING
    reason: str


class DataPlane:
    """Health, metadata, inference and the Triton extensions over a registry
    and an executor: the only door of the REST, gRPC and TF Serving adapters.

    ``executor`` runs a version's model: ``run(target, feeds, output_names,
    rows, deadline, placement) -> RunResult`` (in process: the model
    runner; worker mode: the remote executor); ``blocks(target)`` says
    whether a call waits on something other than this thread (a worker, a
    batch), so that an event loop must not make it inline.
    """

    def __init__(
        self,
        registry: ModelRegistry,
        executor,
        server_name: str,
        server_version: str,
        statistics: StatisticsRecorder | None = None,
        timeout_seconds: float = 0.0,
        limiter: RateLimiter | None = None,
        payload_log=None,
        shared_memory: shm.RegionRegistry | None = None,
        cache: response_cache.ResponseCache | None = None,
    ):
        self.registry = registry
        self.executor = executor
        self.response_cache = cache  # for models whose config enables it (inference/response_cache.py)
        #: The executor can run on an event loop itself (worker mode): no thread per request.
        self._runs_on_loop = getattr(executor, "run_async", None) is not None
        self.limiter = limiter or RateLimiter(Defaults())
        self.payload_log = payload_log  # a PayloadLogger (inference/payload_log.py), or None
        self.statistics = statistics or StatisticsRecorder(flush_seconds=0)
        self.timeout_seconds = timeout_seconds
        #: The machine's registered shared-memory regions (inference/shared_memory.py).
        self.shared_memory = shared_memory or shm.RegionRegistry()
        self._metadata = ServerMetadata(server_name, server_version, EXTENSIONS)

    # -- health and metadata --------------------------------------------
    def live(self) -> bool:
        """True while the process can answer requests."""
        return True

    def ready(self) -> bool:
        """True once the registry snapshot is loaded. Models that failed do not
        make the server unready; ask :meth:`model_ready` about a model."""
        return self.registry.loaded

    def server_metadata(self) -> ServerMetadata:
        return self._metadata

    def knows(self, name: str) -> bool:
        """Whether a model of this name exists (for metrics labels; never queries)."""
        return name in self.registry.models

    def resolve(self, name: str, version: str | None = None) -> ServedVersion:
        """The version that serves a request for ``name`` (``version`` None:
        the default version). Raises ModelNotFound, ModelNotReady (with the
        version's state and reason)."""
        return _served(self.registry.resolve(name, version))

    def route(self, name: str, version: str | None = None) -> ServedVersion:
        """The version that runs an inference request for ``name``: the named
        one, or, when ``version`` is None, the one the model's traffic split
        draws (by weight; the default version without a split). Requests
        naming a version or a label are never split. Raises like
        :meth:`resolve`."""
        entry = self.registry.route(name, version)
        if version:
            return _served(entry)
        model = self.registry.models.get(name)
        return _served(entry, model is not None and bool(model.split))

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether the version (default: the default version) can serve.

        Raises ModelNotFound for an unknown model or version.
        """
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
        """The version a version label points at (TF Serving's ``/labels/``).

        Raises ModelNotFound for an unknown model, InvalidInput for an
        unknown label (as TF Serving: "Unrecognized servable version label").
        """
        try:
            return self.registry.label(name, label)
        except ModelNotFound:
            self.registry.model(name)  # an unknown model stays NOT_FOUND
            raise InvalidInput(f"Unrecognized servable version label: {label}") from None

    def model_versions(self, name: str) -> list[ServedVersion]:
        """Every version of a model in the registry, highest first, whatever
        its state (for status endpoints). Raises ModelNotFound."""
        model = self.registry.model(name)
        return [_served(model.versions[n]) for n in sorted(model.versions, reverse=True)]

    def version(self, name: str, version: str | None = None) -> ServedVersion:
        """A version whatever its state (default: the default version).
        Raises ModelNotFound, ModelNotReady (no version serves)."""
        return _served(self.registry.version(name, version))

    # -- inference -------------------------------------------------------
    def authorize(self, token: str | None, name: str) -> None:
        """Raise Unauthenticated / PermissionDenied unless ``token`` may run
        inference on ``name`` (a no-op while tokens are not required)."""
        self.registry.models  # noqa: B018  (follows the change beacon: token scopes are a registry listener)
        auth.authorize(token, name)

    def admit(self, token: str | None, name: str) -> Admission:
        """:meth:`authorize`, then the caller's rate limits and in-flight caps
        (inference/ratelimit.py): the Admission that :meth:`infer` takes, to
        hold while the request is decoded and run (``with``; leaving it frees
        the in-flight slots). Adapters admit before they decode any tensor.
        Raises Unauthenticated, PermissionDenied, RateLimited (HTTP 429 with
        Retry-After, gRPC RESOURCE_EXHAUSTED)."""
        self.authorize(token, name)
        principal = auth.principal(token, name)
        slots = self.limiter.admit(principal)
        owner = sequences.owner_of(principal)
        return Admission(name, slots, self.limiter.blocking, owner, auth.region_owner(token))

    async def admit_async(self, token: str | None, name: str) -> Admission:
        """:meth:`admit` from an event loop: inline when it cannot block, in a
        thread when it may (a token to look up or required, a shared rate
        limit to ask). Hold the result with ``async with``."""
        if token is not None or auth.tokens_required() or self.limiter.blocks_for(auth.ANONYMOUS):
            return await asyncio.to_thread(self.admit, token, name)  # may reload token scopes, ask Redis
        return self.admit(token, name)

    def infer(
        self, admission: Admission, request: InferenceRequest, version: ServedVersion | None = None
    ) -> InferenceResponse:
        """Run ``request`` on the resolved model version (``version``, when
        the adapter resolved it already for this request), for a caller
        ``admission`` (:meth:`admit`) admitted to its model.

        Checks: every model input given once with the model's datatype and a
        compatible shape (fixed dimensions equal, batch at most
        ``max_batch_size``), no unknown inputs, requested outputs known,
        request parameters (``timeout`` in microseconds and ``priority``
        non-negative integers, names starting with ``triton_`` reserved;
        ``sequence_id``/``sequence_start``/``sequence_end`` type-checked, and
        for a model with sequence batching its place in a sequence; others
        are passed on and ignored). Outputs requested with
        ``classification: N`` come back as their top N (Triton's
        classification extension). Raises PermissionDenied (an admission
        to another model), InvalidInput, ModelNotFound, ModelNotReady or
        DeadlineExceeded.
        """
        started = _now()
        _check_admission(admission, request)
        tracing.follow()  # the machine's trace and log settings (one memory read)
        entry = self._route(admission, request, version)
        try:
            job = self._prepare(entry, request, started, admission.owner, admission.regions)
            cached = response_cache.lookup(self.response_cache, entry, request, job)
            if isinstance(cached, response_cache.CachedRun):
                return self._respond(entry, request, job, cached)
            if tracing.ENABLED and tracing.recording():
                run = self._traced_run(entry, job)
            else:
                run = self.executor.run(
                    entry.target, job.feeds, job.names, job.rows, job.deadline, entry.instance_group, **job.options
                )
            if cached is not None:
                response_cache.keep(self.response_cache, self.statistics, entry, cached, run)
            return self._respond(entry, request, job, run)
        except InferenceError:
            self.statistics.record_failure(entry.model_name, entry.number, _now() - started)
            raise

    def _route(self, admission: Admission, request: InferenceRequest, version: ServedVersion | None = None):
        """The request's version: ``version`` when the adapter resolved it, unless a traffic split
        drew it for a request of a sequence: the split sends all of a sequence to one version."""
        draw = sequences.split_draw(request.parameters, admission.owner)
        if version is not None and (draw is None or not version.routed):
            return version._entry
        return self.registry.route(request.model_name, request.model_version, draw)

    async def _infer_on_loop(
        self, request: InferenceRequest, entry: VersionEntry, admission: Admission
    ) -> InferenceResponse:
        """:meth:`infer` for an executor that runs on the event loop
        (``run_async``: the worker transport's sockets in the loop's
        selector, no thread per request); the same checks, statistics and
        errors."""
        started = _now()
        tracing.follow()
        try:
            job = self._prepare(entry, request, started, admission.owner, admission.regions)
            cached = response_cache.lookup(self.response_cache, entry, request, job)
            if isinstance(cached, response_cache.CachedRun):
                return self._respond(entry, request, job, cached)
            run = await self.executor.run_async(
                entry.target, job.feeds, job.names, job.rows, job.deadline, entry.instance_group, **job.options
            )
            if cached is not None:
                response_cache.keep(self.response_cache, self.statistics, entry, cached, run)
            return self._respond(entry, request, job, run)
        except InferenceError:
            self.statistics.record_failure(entry.model_name, entry.number, _now() - started)
            raise

    def _prepare(
        self, entry: VersionEntry, request: InferenceRequest, started: int, owner: str = "", regions: str = ""
    ) -> _Job:
        """The checked feeds, outputs, deadline and sequence of one request
        (raises InvalidInput); inputs sent in shared-memory regions of
        ``regions`` (their owner) are read, regions for outputs looked up."""
        deadline = self._deadline(request.parameters, started)
        ids = sequences.sequence_parameters(request.parameters)  # checked first, as Triton's front ends do
        plan = shm.RegionPlan() if getattr(self.executor, "remote", False) else None
        for tensor in request.inputs:
            if tensor.data is None:  # the decoders leave an input sent in a region without data
                self._read_region(tensor, regions, plan)
        feeds, rows = self._check_inputs(entry, request)
        names, classify = self._check_outputs(entry, request)
        written = self._output_regions(request, regions, plan) if request.outputs else None
        sequence = sequences.request_for(entry.target.sequence, entry.model_name, ids, rows, owner)
        plan = plan if plan is not None and (plan.inputs or plan.outputs) else None
        return _Job(started, deadline, feeds, rows, names, classify, _now(), sequence, written, plan)

    def _read_region(self, tensor, regions: str, plan: shm.RegionPlan | None) -> None:
        """An input's data from its region (in ``plan`` too, when numeric, for a worker to map itself)."""
        reference = shm.tensor_reference(tensor.parameters, f"input '{tensor.name}'")
        if reference is None:
            raise InvalidInput(f"input '{tensor.name}' has no data")
        tensor.data, located = shm.read_input(self.shared_memory, regions, tensor, reference)
        if plan is not None and tensor.datatype != "BYTES":
            plan.inputs[tensor.name] = located

    def _output_regions(self, request: InferenceRequest, regions: str, plan: shm.RegionPlan | None) -> dict | None:
        """{output name: (reference, view)} of the outputs requested into
        shared-memory regions (checked against their regions before the run;
        in ``plan`` too, for a worker to write itself)."""
        written = None
        for output in request.outputs:
            where = f"output '{output.name}'"
            reference = shm.tensor_reference(output.parameters, where)
            if reference is None:
                continue
            if "classification" in output.parameters:
                raise InvalidInput(f"{where}: Output can't set both 'shared_memory_region' and 'classification'")
            if output.parameters.get("binary_data") is True:
                raise InvalidInput(f"{where}: Output can't set both 'shared_memory_region' and 'binary_data'")
            if written is None:
                written = {}
            located, view = self.shared_memory.span(regions, reference, where)
            written[output.name] = (reference, view)
            if plan is not None:
                plan.outputs[output.name] = located
        return written

    def _respond(self, entry: VersionEntry, request: InferenceRequest, job: _Job, run) -> InferenceResponse:
        """The response of a finished run (classification applied, payload
        logged when sampled), with its statistics recorded."""
        executed = _now()
        types = entry.output_types
        outputs = []
        for name, array in zip(job.names, run.outputs):
            if array is None:  # a worker wrote it into its shared-memory region
                outputs.append(shm.written_output(name, types[name], *job.regions[name], *run.written[name]))
                continue
            count = job.classify.get(name)
            if count:
                labels = entry.output_labels.get(name) or entry.properties.get("labels") or []
                array = classification.classify(array, count, entry.max_batch_size > 0, labels)
                outputs.append(ResponseOutput(name, "BYTES", array.shape, array))
            else:
                outputs.append(ResponseOutput(name, types[name], array.shape, array))
        if job.regions:
            for output in outputs:
                target = job.regions.get(output.name)
                if target is not None and not output.in_region:
                    shm.write_output(output, *target)
        finished = _now()
        rate, cap = entry.payload_log
        if rate and self.payload_log is not None and (rate >= 1.0 or random.random() < rate):
            self.payload_log.submit(entry, request, outputs, cap)  # never blocks
        started, computed = job.started, job.computed
        if isinstance(run, response_cache.CachedRun):
            self.statistics.record_cache_hit(
                entry.model_name, entry.number, total_ns=finished - started, queue_ns=run.queue_ns,
                lookup_ns=run.lookup_ns,
            )  # fmt: skip
            return InferenceResponse(entry.model_name, str(entry.number), outputs, id=request.id)
        self.statistics.record_success(
            entry.model_name,
            entry.number,
            rows=job.rows,
            total_ns=finished - started,
            queue_ns=run.queue_ns,
            input_ns=computed - started,
            infer_ns=max(0, executed - computed - run.queue_ns),
            output_ns=finished - executed,
            batch_size=run.batch_size,
            executed=run.executed,
        )
        return InferenceResponse(
            model_name=entry.model_name,
            model_version=str(entry.number),
            outputs=outputs,
            id=request.id,
        )

    def _traced_run(self, entry: VersionEntry, job: _Job):
        """The executor's run under a ``run`` span; in process, with the runner's
        queue wait, batch formation and session.run (a worker records its own)."""
        tracing.annotate(version=str(entry.number))
        with tracing.step("run", model=entry.model_name, version=str(entry.number)):
            asked = tracing.epoch_ns()
            run = self.executor.run(
                entry.target, job.feeds, job.names, job.rows, job.deadline, entry.instance_group, **job.options
            )
            if not getattr(self.executor, "remote", False):
                tracing.record_run(asked, run.queue_ns, run.form_ns, run.infer_ns, run.batch_size)
        return run

    async def infer_async(self, admission: Admission, request: InferenceRequest) -> InferenceResponse:
        """:meth:`infer` from an event loop (``admission`` from
        :meth:`admit_async`): inline when that cannot block (in process, no
        batching), else in a thread or, in worker mode, on the loop."""
        _check_admission(admission, request)
        entry = self._route(admission, request)
        if self.executor.blocks(entry.target):
            if self._runs_on_loop and not (tracing.ENABLED and tracing.recording()):
                return await self._infer_on_loop(request, entry, admission)
            return await asyncio.to_thread(self.infer, admission, request, _served(entry))
        return self.infer(admission, request, _served(entry))

    def _deadline(self, parameters: dict, started_ns: int) -> float | None:
        """The run's deadline on the time.monotonic() clock, or None."""
        timeout = self.timeout_seconds
        if parameters:
            for key in parameters:
                if key.startswith("triton_") and key not in ALLOWED_RESERVED:
                    raise InvalidInput(
                        f"parameter '{key}': parameter keys starting with 'triton_' are reserved "
                        "for Triton usage and should not be specified"
                    )
            priority = parameters.get("priority")
            if priority is not None and (type(priority) is not int or priority < 0):
                raise InvalidInput(f"parameter 'priority' must be a non-negative integer, got {priority!r}")
            micros = parameters.get("timeout")
            if micros is not None:
                if type(micros) is not int or micros < 0:
                    raise InvalidInput(
                        f"parameter 'timeout' must be a non-negative integer (microseconds), got {micros!r}"
                    )
                if micros and (not timeout or micros / 1e6 < timeout):
                    timeout = micros / 1e6
        if not timeout:
            return None
        return time.monotonic() - (_now() - started_ns) / 1e9 + timeout

    @staticmethod
    def _check_inputs(entry: VersionEntry, request: InferenceRequest) -> tuple[dict, int]:
        """(feeds, batch size) after checking the inputs against the signature."""
        specs = entry.input_specs
        feeds = {}
        batch = None
        for tensor in request.inputs:
            spec = specs.get(tensor.name)
            if spec is None:
                raise InvalidInput(
                    f"unknown input '{tensor.name}' for model '{entry.model_name}' (inputs: {', '.join(specs)})"
                )
            if tensor.name in feeds:
                raise InvalidInput(f"input '{tensor.name}' is given twice")
            if tensor.datatype != spec.datatype.name:
                raise InvalidInput(
                    f"input '{tensor.name}' has datatype {tensor.datatype}, "
                    f"but model '{entry.model_name}' expects {spec.datatype.name}"
                )
            shape = tensor.shape
            expected = spec.shape
            if len(shape) != len(expected) or any(e >= 0 and e != s for s, e in zip(shape, expected)):
                raise InvalidInput(
                    f"input '{tensor.name}' has shape {list(shape)}, but model '{entry.model_name}' "
                    f"expects {list(expected)} (-1: any size)"
                )
            if entry.max_batch_size > 0:
                if shape[0] > entry.max_batch_size:
                    raise InvalidInput(
                        f"input '{tensor.name}' has batch size {shape[0]}, more than the model's "
                        f"max_batch_size {entry.max_batch_size}"
                    )
                if batch is not None and shape[0] != batch:
                    raise InvalidInput(f"inputs disagree on the batch size ({batch} and {shape[0]})")
                batch = shape[0]
            feeds[tensor.name] = tensor.data
        if len(feeds) != len(specs):
            missing = [name for name in specs if name not in feeds and name not in entry.optional_inputs]
            if missing:
                raise InvalidInput(f"model '{entry.model_name}' needs input(s) {', '.join(missing)}, not given")
        return feeds, (batch if batch is not None else 1)

    @staticmethod
    def _check_outputs(entry: VersionEntry, request: InferenceRequest) -> tuple[list[str], dict[str, int]]:
        """(output names to run, {name: classification count})."""
        if request.outputs is None:
            return entry.output_names, {}
        names: list[str] = []
        classify: dict[str, int] = {}
        for output in request.outputs:
            datatype = entry.output_types.get(output.name)
            if datatype is None:
                raise InvalidInput(
                    f"unknown output '{output.name}' for model '{entry.model_name}' "
                    f"(outputs: {', '.join(entry.output_names)})"
                )
            if output.name in names:
                raise InvalidInput(f"output '{output.name}' is requested twice")
            names.append(output.name)
            if output.parameters:
                count = classification.requested_count(output.name, datatype, output.parameters)
                if count:
                    classify[output.name] = count
        return names, classify

    # -- model repository extension --------------------------------------
    def repository_index(self, ready_only: bool = False, token: str | None = None) -> list[IndexEntry]:
        """Every model version with its state (READY, UNAVAILABLE, LOADING)
        and the reason it does not serve; only READY ones with ``ready_only``.
        While tokens are required, only the models the token may see."""
        models = self.registry.models  # first: token scopes follow the registry
        visible = auth.visible_models(token)
        entries = []
        for name in sorted(models):
            if visible is not None and not visible(name):
                continue
            model = models[name]
            for number in sorted(model.versions):
                version = model.versions[number]
                if version.serving:
                    state, reason = "READY", ""
                elif version.state in ("UPLOADED", "VALIDATING", "LOADING"):
                    state, reason = "LOADING", version.state.lower()
                else:
                    state, reason = "UNAVAILABLE", version.reason or version.state
                if ready_only and state != "READY":
                    continue
                entries.append(IndexEntry(name, str(number), state, reason))
        return entries

    def load(self, name: str, parameters: dict | None = None, token: str | None = None) -> None:
        """Load ``name`` in every server process (its policy's READY versions
        serve again) before returning. Parameters: ``config`` (a JSON string:
        the model's whole Triton configuration, replacing its own as Triton's
        load does; the registry source checks and applies it). Needs a token
        of the model's team or an operator's (audited as its user). Raises Unauthenticated,
        PermissionDenied; ModelNotFound, InvalidInput with Triton's "failed to
        load '<name>', " before the reason."""
        self.registry.models  # noqa: B018  (follows the change beacon: token scopes are a registry listener)
        caller = auth.authorize_control(token, name)
        try:
            self.registry.model(name)
            for key, value in (parameters or {}).items():
                if key == "config":
                    if not isinstance(value, str):
                        raise InvalidInput("Config parameter 'config' must have string type for its value")
                    self.registry.set_config(name, value, actor=caller.actor)
                elif key.startswith("file:"):
                    raise InvalidInput("file: parameters are not supported; upload new versions to the model store")
                else:
                    raise InvalidInput(f"Unrecognized load parameter '{key}'")
        except (ModelNotFound, InvalidInput) as exc:
            raise type(exc)(triton_texts.load_failed(name, exc.message)) from None
        self.registry.set_loaded(name, True, caller.actor)

    def unload(self, name: str, parameters: dict | None = None, token: str | None = None) -> None:
        """Unload ``name`` in every server process before returning; stored
        versions stay. ``unload_dependents`` is accepted (there are no
        ensembles to unload). Needs a token like :meth:`load`. Raises
        Unauthenticated, PermissionDenied, ModelNotFound, InvalidInput."""
        caller = self._control(token, name)
        for key, value in (parameters or {}).items():
            if key != "unload_dependents":
                raise InvalidInput(f"unrecognized unload parameter '{key}'")
            if not isinstance(value, bool):
                raise InvalidInput("parameter 'unload_dependents' must be a boolean")
        self.registry.set_loaded(name, False, caller.actor)

    def _control(self, token: str | None, name: str):
        """The caller allowed to load/unload ``name``; an unknown model is
        NOT_FOUND only for callers that could change it (operators)."""
        self.registry.models  # noqa: B018  (follows the change beacon: token scopes are a registry listener)
        caller = auth.authorize_control(token, name)
        self.registry.model(name)
        return caller

    # -- model configuration extension -----------------------------------
    def model_config(self, name: str, version: str | None = None) -> dict:
        """Triton's model configuration of a model as JSON-ready data, as
        Triton returns it (inference/model_config.py). The signature is the
        given version's, else the default version's, else the newest
        version's. Raises ModelNotFound."""
        model = self.registry.model(name)
        gpus = getattr(self.executor, "gpus", tuple)()  # what KIND_AUTO resolves to
        return model_config.render(model, self._config_version(model, version), gpus)

    def _config_version(self, model: ModelEntry, version: str | None) -> VersionEntry | None:
        if version:
            number = parse_version(version)
            if number not in model.versions:
                raise triton_texts.unknown_version(model.name, number, list(model.versions))
            return model.versions[number]
        if model.default is not None:
            return model.default
        return model.versions[max(model.versions)] if model.versions else None

    # -- statistics extension ----------------------------------------------
    def model_statistics(
        self, name: str | None = None, version: str | None = None, token: str | None = None
    ) -> list[ModelStatistics]:
        """Statistics across all server processes: of every served version
        (no name), of a model's served versions, or of one version. While
        tokens are required, only of the models the token may see. Raises
        ModelNotFound, PermissionDenied."""
        models = self.registry.models  # first: token scopes follow the registry
        visible = auth.visible_models(token)
        if name:
            if visible is not None and not visible(name):
                raise PermissionDenied(f"the token may not see model '{name}'")
            model = self.registry.model(name)
            if version:
                number = parse_version(version)
                if number not in model.versions:
                    raise triton_texts.unknown_version(name, number, list(model.versions))
                keys = [(name, number)]
            else:
                keys = [(name, n) for n in sorted(model.served)]
        else:
            keys = [
                (m.name, n) for m in models.values() if visible is None or visible(m.name) for n in sorted(m.served)
            ]
        return self.statistics.read(keys)

    # -- shared-memory extensions --------------------------------------------
    def shared_memory_status(self, token: str | None, name: str | None = None) -> list[shm.Region]:
        """The caller's registered system shared-memory regions (``name``:
        that one; raises RegionNotFound). Raises Unauthenticated (no token
        while tokens are required, an unknown one)."""
        owner, _caller = self._region_caller(token)
        return self.shared_memory.status(owner, name)

    def register_shared_memory(self, token: str | None, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes of the shared-memory object ``key``
        from ``offset`` as the caller's region ``name``, for every process of
        the machine (audited). Raises Unauthenticated, InvalidInput (see
        :meth:`inference.shared_memory.RegionRegistry.register`)."""
        owner, caller = self._region_caller(token)
        self.shared_memory.register(owner, name, key, offset, byte_size)
        _audit(caller, "shared_memory.register", "", name=name, key=key, offset=offset, byte_size=byte_size,
               owner=owner, by=caller.label)  # fmt: skip

    def unregister_shared_memory(self, token: str | None, name: str | None = None) -> None:
        """Unregister the caller's region ``name``, or all of its regions
        (``name`` empty); requests using one keep it until they finish
        (audited when something was unregistered). Raises Unauthenticated."""
        owner, caller = self._region_caller(token)
        gone = self.shared_memory.unregister(owner, name)
        if gone:
            names = [r.name for r in gone]
            _audit(caller, "shared_memory.unregister", "", names=names, owner=owner, by=caller.label)

    def cuda_shared_memory_status(self, token: str | None, name: str | None = None) -> list:
        """CUDA shared memory is not supported: no region (``name``: RegionNotFound)."""
        self._region_caller(token)
        if name:
            raise shm.RegionNotFound(f"Unable to find cuda shared memory region: '{name}'")
        return []

    def register_cuda_shared_memory(self, token: str | None, name: str) -> None:
        """Always InvalidInput: CUDA shared memory is not supported."""
        self._region_caller(token)
        raise InvalidInput(shm.CUDA_UNSUPPORTED)

    def unregister_cuda_shared_memory(self, token: str | None, name: str | None = None) -> None:
        """Nothing to unregister (CUDA shared memory is not supported)."""
        self._region_caller(token)

    def _region_caller(self, token: str | None):
        self.registry.models  # noqa: B018  (follows the change beacon: token scopes are a registry listener)
        return auth.authorize_regions(token)

    # -- trace and logging extensions (operators) ---------------------------------
    def trace_settings(self, token: str | None, model: str | None = None, update: dict | None = None) -> dict:
        """Triton's trace settings, global or a model's (its own over the global
        ones), changed by ``update`` when given (``None`` values clear a
        model's own); for every process of the machine before this returns
        (inference/tracing.py). Operators only (audited). Raises
        Unauthenticated, PermissionDenied, ModelNotFound, InvalidInput."""
        self.registry.models  # noqa: B018  (follows the change beacon: token scopes are a registry listener)
        caller = auth.authorize_operator(token)
        if model:
            self.registry.model(model)
        settings = tracing.runtime_settings()
        settings.follow()  # another process (REST or gRPC) may have changed them since this one's last inference
        if update is None:
            return settings.trace(model)
        clean = tracing.clean_trace_settings(update, per_model=bool(model))  # bounded: audited as applied
        result = settings.update_trace(clean, model)
        _audit(caller, "trace.settings", model or "", settings=clean)
        return result

    def log_settings(self, token: str | None, update: dict | None = None) -> dict:
        """Triton's log settings, changed by ``update`` when given, in every
        process of the machine. Operators only (audited). Raises
        Unauthenticated, PermissionDenied, InvalidInput."""
        self.registry.models  # noqa: B018
        caller = auth.authorize_operator(token)
        settings = tracing.runtime_settings()
        settings.follow()
        if update is None:
            return settings.log()
        clean = tracing.clean_log_settings(update)
        result = settings.update_log(clean)
        _audit(caller, "log.settings", "", settings=clean)
        return result


def _check_admission(admission: Admission, request: InferenceRequest) -> None:
    if admission.model_name != request.model_name:
        raise PermissionDenied(
            f"the caller was admitted to model '{admission.model_name}', not to '{request.model_name}'"
        )


def _audit(caller, action: str, model_name: str, **detail) -> None:
    if container.audit_log is not None:
        container.audit_log.record(caller.actor, action, model_name, **detail)


_dataplane: DataPlane | None = None
_dataplane_lock = threading.Lock()


def get_dataplane() -> DataPlane:
    """The process-wide DataPlane, built on first use by the factory the
    composition root installed (``container.dataplane_factory``), so that
    each server process, after a fork, starts its own threads."""
    global _dataplane
    if _dataplane is None:
        with _dataplane_lock:
            if _dataplane is None:
                if container.dataplane_factory is None:
                    raise RuntimeError("no data plane factory is installed (the composition root did not run)")
                _dataplane = container.dataplane_factory()
    return _dataplane
