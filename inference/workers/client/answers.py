"""What a worker's answer frame means to the front end: a run's
:class:`~inference.runtime.execution.RunResult` (:func:`run_result`), a
segment's :class:`SegmentRun` (:func:`segment_result`), or the error the
worker reports, raised as its protocol error."""

from __future__ import annotations

from dataclasses import dataclass

from inference.protocol import errors
from inference.runtime.execution import RunResult
from inference.workers import frames, messages


def run_result(answer, body: memoryview, output_names: list[str]) -> RunResult:
    """The run's result from a worker's answer frame (raises the error it reports)."""
    if isinstance(answer, messages.ErrorAnswer):
        raise errors.from_code(answer.code, answer.message)
    if not isinstance(answer, messages.RunAnswer):
        raise errors.ModelNotReady(f"a worker answered a request with {type(answer).__name__}")
    outputs = frames.tensors(answer, body, "worker answer")
    written = None
    if answer.written:  # outputs the worker wrote into the request's shared-memory regions
        written = {entry.name: (tuple(entry.shape), entry.nbytes) for entry in answer.written}
        outputs.update(dict.fromkeys(written))
    try:
        return RunResult(
            [outputs[name] for name in output_names], answer.batch, answer.executed, answer.queue_ns,
            answer.infer_ns, written=written,
        )  # fmt: skip
    except KeyError as exc:
        raise errors.ModelNotReady(f"a worker's answer lacks the output {exc}") from None


@dataclass(slots=True)
class SegmentRun:
    """How a segment ran on a worker: ``runs``, one
    :class:`~inference.workers.messages.StepRun` per step that ran, in
    order; ``outputs``: the tensors asked back by name (when every step
    ran); ``error``: the failure of the step after the last that ran, else
    None."""

    runs: list
    outputs: dict
    error: errors.InferenceError | None = None


def segment_result(answer, body: memoryview, returns: list[str], steps: int) -> SegmentRun:
    """A segment's result from a worker's answer frame (of ``steps`` steps,
    ``returns`` asked back); raises the error the worker reports for the
    whole request (a frame it could not read), ModelNotReady for an answer
    that is not one."""
    if isinstance(answer, messages.ErrorAnswer):
        raise errors.from_code(answer.code, answer.message)
    if not isinstance(answer, messages.SegmentAnswer) or len(answer.runs) > steps:
        raise errors.ModelNotReady(f"a worker answered a segment with {type(answer).__name__}")
    if answer.error is not None:
        if len(answer.runs) == steps:
            raise errors.ModelNotReady("a worker's segment answer reports a failure after its last step")
        return SegmentRun(answer.runs, {}, errors.from_code(answer.error.code, answer.error.message))
    outputs = frames.tensors(answer, body, "worker answer")
    missing = [name for name in returns if name not in outputs]
    if missing or len(answer.runs) != steps:
        raise errors.ModelNotReady(f"a worker's segment answer lacks {', '.join(missing) or 'steps'}")
    return SegmentRun(answer.runs, outputs)
