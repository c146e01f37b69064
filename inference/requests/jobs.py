"""One checked inference request on its way through the data plane (a
:class:`Job`): its feeds, outputs, deadline and sequence place, its tensors
read from and written to system shared-memory regions, and the response
outputs of its run (classification applied).

Spec: the Open Inference Protocol, "Inference"
(https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md#inference);
Triton's shared-memory and classification extensions
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_shared_memory.md,
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_classification.md).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from inference import response_cache
from inference.protocol.errors import InvalidInput
from inference.protocol.types import InferenceRequest, InferenceResponse, ResponseOutput
from inference.requests import checks as request_checks
from inference.requests import classification
from inference.runtime.queue_policy import Schedule
from inference.runtime.sequences import policy as sequences
from inference.serving.snapshot import VersionEntry
from inference.shared_memory import region_tensors
from inference.shared_memory import regions as shm

_now = time.perf_counter_ns


@dataclass(slots=True)
class Job:
    """One checked request: times in ``perf_counter_ns``, the deadline on
    ``time.monotonic()``; ``feeds`` ``{name: ndarray}``, ``rows`` the batch
    size, ``names`` the outputs to run, ``classify`` ``{output: top N}``."""

    started: int
    deadline: float | None
    feeds: dict
    rows: int
    names: list
    classify: dict
    computed: int
    sequence: sequences.SequenceRequest | None = None
    regions: dict | None = None  # output name -> (TensorReference, the region's span it is written into)
    plan: region_tensors.RegionPlan | None = None  # for a remote executor: tensors its worker may read itself
    schedule: Schedule | None = None  # its priority and timeout, for a dynamic batcher

    @property
    def options(self) -> dict:
        """The executor's keyword arguments beside the tensors."""
        options = {"sequence": self.sequence}
        if self.plan is not None:
            options["regions"] = self.plan
        if self.schedule is not None:
            options["schedule"] = self.schedule
        return options


def prepare(
    entry: VersionEntry,
    request: InferenceRequest,
    started: int,
    owner: str,
    regions: str,
    timeout_seconds: float,
    shared_memory: shm.RegionRegistry,
    remote: bool,
) -> Job:
    """The checked feeds, outputs, deadline and sequence of one request
    (:mod:`inference.requests.checks`; raises InvalidInput); inputs sent in
    shared-memory regions of ``regions`` (their owner) are read, regions for
    outputs looked up (for a ``remote`` executor, also planned for its
    worker to map); ``owner``: whose sequences the request continues."""
    batching = entry.target.batching if entry.target is not None else None  # an ensemble's version has no target
    levels = batching.levels if batching is not None else None
    deadline = request_checks.deadline(request.parameters, started, timeout_seconds, levels)
    ids = sequences.sequence_parameters(request.parameters)  # checked first, as Triton's front ends do
    plan = region_tensors.RegionPlan() if remote else None
    for tensor in request.inputs:
        if tensor.data is None:  # the decoders leave an input sent in a region without data
            _read_region(shared_memory, tensor, regions, plan, entry.model_name)
    feeds, rows = request_checks.check_inputs(entry, request)
    names, classify = request_checks.check_outputs(entry, request)
    written = _output_regions(shared_memory, request, regions, plan) if request.outputs else None
    policy = entry.target.sequence if entry.target is not None else None  # an ensemble's version has no target
    sequence = sequences.request_for(policy, entry.model_name, ids, rows, owner)
    plan = plan if plan is not None and (plan.inputs or plan.outputs) else None
    schedule = request_checks.schedule(request.parameters, levels)
    return Job(started, deadline, feeds, rows, names, classify, _now(), sequence, written, plan, schedule)


def _read_region(
    shared_memory: shm.RegionRegistry, tensor, regions: str, plan: region_tensors.RegionPlan | None, model: str
) -> None:
    """An input's data from its region (when numeric and ``plan`` is given,
    only planned: a worker on this machine reads it itself); ``model`` names
    the model in errors."""
    reference = region_tensors.tensor_reference(tensor.parameters, f"input '{tensor.name}'")
    if reference is None:
        raise InvalidInput(f"input '{tensor.name}' has no data")
    defer = plan is not None and tensor.datatype != "BYTES"
    tensor.data, located = region_tensors.read_input(shared_memory, regions, tensor, reference, defer, model)
    if defer:
        plan.inputs[tensor.name] = located


def _output_regions(
    shared_memory: shm.RegionRegistry, request: InferenceRequest, regions: str, plan: region_tensors.RegionPlan | None
) -> dict | None:
    """{output name: (reference, span)} of the outputs requested into
    shared-memory regions (checked against their regions before the run;
    in ``plan`` too, for a worker to write itself)."""
    written = None
    for output in request.outputs:
        where = f"output '{output.name}'"
        reference = region_tensors.tensor_reference(output.parameters, where)
        if reference is None:
            continue
        if "classification" in output.parameters:
            raise InvalidInput(f"{where}: Output can't set both 'shared_memory_region' and 'classification'")
        if output.parameters.get("binary_data") is True:
            raise InvalidInput(f"{where}: Output can't set both 'shared_memory_region' and 'binary_data'")
        if written is None:
            written = {}
        located = shared_memory.span(regions, reference, where)
        written[output.name] = (reference, located)
        if plan is not None:
            plan.outputs[output.name] = located
    return written


def respond(
    entry: VersionEntry, request: InferenceRequest, job: Job, run, statistics, payload_log
) -> InferenceResponse:
    """The response of a finished ``run`` (a RunResult or a
    :class:`~inference.response_cache.CachedRun`): its outputs
    (:func:`outputs`), the payload logged when sampled (``payload_log``, a
    PayloadLogger or None; never blocks), its statistics recorded in
    ``statistics`` (a StatisticsRecorder; times in ns)."""
    executed = _now()
    result = outputs(entry, job, run)
    finished = _now()
    rate, cap = entry.payload_log
    if rate and payload_log is not None and (rate >= 1.0 or random.random() < rate):
        if region_tensors.read_for_log(job.plan, request.inputs, result, getattr(run, "written", None)):
            payload_log.submit(entry, request, result, cap)  # never blocks
    started, computed = job.started, job.computed
    if isinstance(run, response_cache.CachedRun):
        statistics.record_cache_hit(
            entry.model_name, entry.number, total_ns=finished - started, queue_ns=run.queue_ns,
            lookup_ns=run.lookup_ns,
        )  # fmt: skip
        return InferenceResponse(entry.model_name, str(entry.number), result, id=request.id)
    statistics.record_success(
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
    return InferenceResponse(entry.model_name, str(entry.number), result, id=request.id)


def outputs(entry: VersionEntry, job: Job, run) -> list[ResponseOutput]:
    """The response outputs of a finished ``run`` (a RunResult or a cached
    one), in ``job.names`` order: classified outputs as BYTES (Triton's classification extension),
    outputs requested into shared-memory regions written there."""
    types = entry.output_types
    result = []
    for name, array in zip(job.names, run.outputs):
        if array is None:  # a worker wrote it into its shared-memory region
            reference = job.regions[name][0]
            result.append(region_tensors.written_output(name, types[name], reference, *run.written[name]))
            continue
        count = job.classify.get(name)
        if count:
            labels = entry.output_labels.get(name) or entry.properties.get("labels") or []
            array = classification.classify(array, count, entry.max_batch_size > 0, labels)
            result.append(ResponseOutput(name, "BYTES", array.shape, array))
        else:
            result.append(ResponseOutput(name, types[name], array.shape, array))
    if job.regions:
        for output in result:
            target = job.regions.get(output.name)
            if target is not None and not output.in_region:
                region_tensors.write_output(output, *target)
    return result
