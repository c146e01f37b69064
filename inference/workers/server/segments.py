"""The worker's side of an ensemble segment
(:class:`~inference.workers.messages.SegmentRequest`, sent by
inference/ensembles/segments.py): consecutive steps run here in order, each
checked against its version's signature and run as a single request of that
version would be (the model runner: instances, dynamic batching, the
deadline), the tensors between them kept here; the answer carries only the
tensors asked back, and how each step ran (for the front end's statistics).

The first step that fails ends the segment: the answer reports the steps
that ran and the failure (its category: INVALID_ARGUMENT stays
INVALID_ARGUMENT), which the front end attributes to the next step.
"""

from __future__ import annotations

import logging
import time

from inference.observability import tracing
from inference.protocol.errors import DeadlineExceeded, InferenceError, InvalidInput, ModelNotReady
from inference.protocol.types import InferenceRequest, RequestedOutput, RequestInput
from inference.requests import checks as request_checks
from inference.serving.snapshot import step_entry
from inference.workers import frames, messages

logger = logging.getLogger(__name__)

_now = time.perf_counter_ns


def run(runtime, request: messages.SegmentRequest, body, shared) -> list:
    """The answer frame's buffers for ``request`` (its tensors in the frame
    ``body``, or in the connection's ``shared`` memory) on ``runtime`` (a
    :class:`~inference.workers.server.runtime.WorkerRuntime`). Raises InvalidInput for a
    frame whose tensors do not read (the whole request fails)."""
    tensors = frames.tensors(request, body, "request", shared)
    deadline = time.monotonic() + (request.deadline - time.time())
    runs: list[messages.StepRun] = []
    for step in request.steps:
        try:
            runs.append(_run_step(runtime, step, tensors, deadline))
        except InferenceError as exc:
            return frames.encode(messages.SegmentAnswer(runs, error=messages.ErrorAnswer(exc.code, exc.message)))
        except Exception as exc:  # never leave the front end waiting
            logger.exception("a segment step failed on %s", runtime.device)
            error = messages.ErrorAnswer("INTERNAL", f"the worker failed: {type(exc).__name__}")
            return frames.encode(messages.SegmentAnswer(runs, error=error))
    missing = [name for name in request.returns if name not in tensors]
    if missing:
        raise InvalidInput(f"the segment writes no tensor {', '.join(missing)}")
    return frames.encode(messages.SegmentAnswer(runs), [(name, tensors[name]) for name in request.returns])


def _run_step(runtime, step: messages.SegmentStep, tensors: dict, deadline: float) -> messages.StepRun:
    """Run one step on the segment's ``tensors`` (its outputs added to them)."""
    started = _now()
    if time.monotonic() >= deadline:
        raise DeadlineExceeded("the request's deadline passed before this step ran")
    target = runtime.target(step.model, step.version, step.sha256)
    entry = step_entry(runtime.registry.models, step)
    if entry is None:
        raise ModelNotReady(f"version {step.version} of model '{step.model}' was deleted")
    specs = entry.input_specs
    missing = [tensor for tensor in step.inputs.values() if tensor not in tensors]
    if missing:
        raise InvalidInput(f"the segment has no tensor {', '.join(missing)} for this step")
    inputs = [
        RequestInput(name, specs[name].datatype.name if name in specs else "", tuple(tensors[t].shape), tensors[t])
        for name, t in step.inputs.items()
    ]
    asked = InferenceRequest(step.model, inputs, str(step.version), outputs=[RequestedOutput(n) for n in step.outputs])
    feeds, rows = request_checks.check_inputs(entry, asked)
    names, _ = request_checks.check_outputs(entry, asked)
    checked = _now()
    traced = tracing.epoch_ns() if tracing.ENABLED else 0
    runtime.meter.begin(target.key, target.instances)
    try:
        result = runtime.runner.run(target, feeds, names, rows, deadline, None)
    finally:
        runtime.meter.end(target.key)
    ran = _now()
    if traced:
        tracing.record_run(traced, result.queue_ns, result.form_ns, result.infer_ns, result.batch_size)
    for name, array in zip(names, result.outputs):
        tensors[step.outputs[name]] = array
    return messages.StepRun(
        rows, result.batch_size, bool(result.executed), max(0, result.queue_ns), checked - started, ran - checked,
        _now() - started,
    )  # fmt: skip
