"""An ensemble's inference through the data plane: the request checked
against the ensemble's own signature, its graph run (inference/ensembles.py)
with each step sent through the data plane's ordinary path for the step's
pinned version (its checks, response cache, executor: in process or on a
worker, and statistics), and the ensemble's response with its own
statistics. In worker mode, consecutive steps that one worker can run are
sent to it together (:mod:`inference.ensemble_segments`): the tensors
between them stay there.

The caller was admitted for the ensemble (token, rate limits): its steps run
under that admission, without a second credential check. A request to an
N-step ensemble costs N requests of the caller's rate limits: admitted for
one, it is charged the other N - 1 before anything else
(:meth:`inference.ratelimit.Admission.charge`; refused with RateLimited, no
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

from inference import ensemble_segments, ensembles, jobs, ratelimit
from inference.admission import Admission
from inference.protocol.errors import DeadlineExceeded, InferenceError, ModelNotReady
from inference.protocol.types import InferenceRequest, RequestedOutput, RequestInput
from inference.runtime.execution import RunResult
from inference.snapshot import VersionEntry, step_entry

_now = time.perf_counter_ns
#: An admission that holds no rate-limit slots: a step runs under its ensemble's.
_NO_SLOTS = ratelimit.Admission()


def infer(dataplane, admission: Admission, request: InferenceRequest, entry: VersionEntry, started: int):
    """The response of ``request`` on the ensemble version ``entry`` (see the
    module doc); ``dataplane``: the :class:`~inference.dataplane.DataPlane`
    whose :meth:`infer` runs each step. Raises InvalidInput (the request, or
    a step's), ModelNotReady, DeadlineExceeded, InferenceError, RateLimited
    (before anything is done: the caller cannot afford the steps now)."""
    steps = len(entry.ensemble.steps)
    admission.limits.charge(steps - 1, f"a request to ensemble '{entry.model_name}' ({steps} steps)")
    try:
        job = jobs.prepare(entry, request, started, admission.owner, admission.regions, dataplane.timeout_seconds,
                           dataplane.shared_memory, False)  # fmt: skip
        snapshot = dataplane.registry.models  # one snapshot for the whole graph
        plan, run_step = entry.ensemble, _step_runner(snapshot, dataplane, admission, job)
        fits = ensemble_segments.worker_fits(dataplane, snapshot)
        if fits is not None:  # worker mode: consecutive steps on one worker run there together
            plan = ensemble_segments.fuse(plan, fits)
            run_step = ensemble_segments.runner(dataplane, snapshot, job, run_step, admission.flow)
        tensors = ensembles.run(entry.model_name, plan, job.feeds, run_step)
        run = RunResult([tensors[name] for name in job.names], job.rows, True, 0, _now() - job.computed)
        return jobs.respond(entry, request, job, run, dataplane.statistics, dataplane.payload_log)
    except InferenceError:
        dataplane.statistics.record_failure(entry.model_name, entry.number, _now() - started)
        raise


def blocks(dataplane, entry: VersionEntry, admission: Admission) -> bool:
    """Whether running the ensemble version ``entry`` for ``admission`` may
    wait (charging its steps asks a shared rate-limit store, a step's model
    batches, runs sequences or runs on a worker, or is itself an ensemble):
    an event loop then runs it in a thread. A step whose version is gone
    does not wait: it fails at once."""
    if len(entry.ensemble.steps) > 1 and admission.limits.charge_blocks:
        return True
    snapshot = dataplane.registry.models
    for step in entry.ensemble.steps:
        version = step_entry(snapshot, step)
        if version is not None and (version.target is None or dataplane.executor.blocks(version.target)):
            return True
    return False


def _step_runner(snapshot, dataplane, admission: Admission, job: jobs.Job):
    """Runs one step: a request to its pinned version (in the registry's
    ``snapshot``) through ``dataplane.infer``."""

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
        response = dataplane.infer(inside, request, entry)
        return {output.name: output.data for output in response.outputs}

    return run_step
