"""An ensemble's inference through the data plane: the request checked
against the ensemble's own signature, its graph run (inference/ensembles/plan.py)
with each step sent through the data plane's ordinary path for the step's
pinned version (its checks, response cache, executor: in process or on a
worker, and statistics), and the ensemble's response with its own
statistics. In worker mode, consecutive steps that one worker can run are
sent to it together (:mod:`inference.ensembles.segments`): the tensors
between them stay there.

The caller was admitted for the ensemble (token, rate limits): its steps run
under that admission, without a second credential check. A request to an
N-step ensemble costs N requests of the caller's rate limits: admitted for
one, it is charged the other N - 1 before anything else
(:meth:`inference.admission.ratelimit.Admission.charge`; refused with RateLimited, no
step run, when the caller cannot afford them now). It holds one in-flight
slot, as any request does (docs/ensembles.md says why). Triton counts
statistics the same way: the ensemble counts its requests, each composing
model its own inferences
(https://github.com/triton-inference-server/server/blob/main/docs/user_guide/ensemble_models.md).
Errors of a step are raised with its category (InvalidInput stays 400),
their message naming the step: ``ensemble 'e' step 2 (model 'b' version 1): ...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from inference.admission import ratelimit
from inference.admission.caller import Admission
from inference.ensembles import plan as ensembles
from inference.ensembles import segments as ensemble_segments
from inference.ensembles.segments import SegmentRunner
from inference.executor import Executor
from inference.observability import metrics
from inference.observability.rollups import TRANSPORT
from inference.observability.statistics import StatisticsRecorder
from inference.protocol.errors import DeadlineExceeded, InferenceError, ModelNotReady
from inference.protocol.types import InferenceRequest, RequestedOutput, RequestInput
from inference.requests import jobs
from inference.runtime.execution import RunResult
from inference.serving.registry import ModelRegistry
from inference.serving.snapshot import VersionEntry, step_entry
from inference.shared_memory.regions import RegionRegistry

_now = time.perf_counter_ns
#: An admission that holds no rate-limit slots: a step runs under its ensemble's.
_NO_SLOTS = ratelimit.Admission()


class EnsembleRuns:
    """Ensemble versions' inferences (see module doc) over the data plane's
    collaborators: the ``registry`` (one snapshot per request), the
    ``executor`` (whether a step waits), the ``statistics`` recorder, the
    ``payload_log`` (or None), the machine's shared-memory ``regions``, the
    default timeout (``timeout_seconds``), the ``segments`` runner (worker
    mode; None in process) and ``step``: the data plane's inference of one
    request, ``step(admission, request, version) -> InferenceResponse``,
    through which each step runs."""

    def __init__(
        self, *, registry: ModelRegistry, executor: Executor, statistics: StatisticsRecorder, payload_log,
        regions: RegionRegistry, timeout_seconds: float, segments: SegmentRunner | None, step: Callable,
    ):  # fmt: skip
        self.registry = registry
        self.executor = executor
        self.statistics = statistics
        self.payload_log = payload_log
        self.regions = regions
        self.timeout_seconds = timeout_seconds
        self.segments = segments
        self.step = step

    def infer(self, admission: Admission, request: InferenceRequest, entry: VersionEntry, started: int):
        """The response of ``request`` on the ensemble version ``entry`` (see the
        module doc). Raises InvalidInput (the request, or a step's),
        ModelNotReady, DeadlineExceeded, InferenceError, RateLimited (before
        anything is done: the caller cannot afford the steps now)."""
        steps = len(entry.ensemble.steps)
        admission.limits.charge(steps - 1, f"a request to ensemble '{entry.model_name}' ({steps} steps)")
        try:
            job = jobs.prepare(entry, request, started, admission.owner, admission.regions, self.timeout_seconds,
                               self.regions, False)  # fmt: skip
            snapshot = self.registry.models  # one snapshot for the whole graph
            plan, run_step = entry.ensemble, self._step_runner(snapshot, admission, job)
            if self.segments is not None:  # worker mode: consecutive steps on one worker run there together
                plan = ensemble_segments.fuse(plan, self.segments.fits(snapshot))
                run_step = self.segments.runner(snapshot, job, run_step, admission.flow)
            tensors = ensembles.run(entry.model_name, plan, job.feeds, run_step)
            run = RunResult([tensors[name] for name in job.names], job.rows, True, 0, _now() - job.computed)
            return jobs.respond(entry, request, job, run, self.statistics, self.payload_log)
        except InferenceError:
            self.statistics.record_failure(entry.model_name, entry.number, _now() - started)
            raise

    def blocks(self, entry: VersionEntry, admission: Admission) -> bool:
        """Whether running the ensemble version ``entry`` for ``admission`` may
        wait (charging its steps asks a shared rate-limit store, a step's model
        batches, runs sequences or runs on a worker, or is itself an ensemble):
        an event loop then runs it in a thread. A step whose version is gone
        does not wait: it fails at once."""
        if len(entry.ensemble.steps) > 1 and admission.limits.charge_blocks:
            return True
        snapshot = self.registry.models
        for step in entry.ensemble.steps:
            version = step_entry(snapshot, step)
            if version is not None and (version.target is None or self.executor.blocks(version.target)):
                return True
        return False

    def _step_runner(self, snapshot: dict, admission: Admission, job: jobs.Job):
        """Runs one step: a request to its pinned version (in the registry's
        ``snapshot``) through the data plane's ``step``."""

        def run_step(step: ensembles.Step, inputs: dict) -> dict:
            entry = step_entry(snapshot, step)
            if entry is None or not entry.serving:
                why = "was deleted" if entry is None else f"does not serve ({entry.reason or entry.state})"
                raise ModelNotReady(f"version {step.version} of model '{step.model}' {why}")
            specs = entry.input_specs
            parameters = {}
            if job.deadline is not None:
                left = job.deadline - time.monotonic()
                if left <= 0:
                    raise DeadlineExceeded("the request's deadline passed before this step ran")
                parameters["timeout"] = max(1, int(left * 1e6))  # microseconds
            request = InferenceRequest(
                model_name=step.model,
                inputs=[
                    RequestInput(name, specs[name].datatype.name if name in specs else "", tuple(array.shape), array)
                    for name, array in inputs.items()
                ],
                model_version=str(step.version),
                parameters=parameters,
                outputs=[RequestedOutput(name) for name in step.output_map],
            )
            inside = Admission(step.model, _NO_SLOTS, False, admission.owner, "", admission.flow)
            began, outcome = time.perf_counter(), "internal"
            try:
                response = self.step(inside, request, entry)
                outcome = "success"
            except InferenceError as exc:
                outcome = exc.code.lower()
                raise
            finally:  # a composing model's request, as Triton counts it
                metrics.count_step(TRANSPORT.get(), step.model, entry.version, outcome, time.perf_counter() - began)
            return {output.name: output.data for output in response.outputs}

        return run_step
