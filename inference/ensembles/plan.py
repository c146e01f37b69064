"""Ensembles: a graph of model versions run as one model (Triton's
``platform: "ensemble"`` with ``ensemble_scheduling``).

An ensemble version is a :class:`Plan`: its steps, each a composing
model's *pinned* version (the registry resolves a configured
``model_version: -1`` when the ensemble version is created, see
models_store/intake/ensembles.py) with Triton's maps: ``input_map`` (the step
model's input name -> the ensemble tensor it reads) and ``output_map`` (the
step model's output name -> the ensemble tensor it writes). Ensemble
tensors are the ensemble's own inputs, and what the steps write; the
ensemble's outputs are some of the latter.

:func:`check_graph` checks a graph (every tensor read is available, each
written once, no cycle, every output written) and gives each step the steps
it waits for; :func:`run` runs a plan with a step runner the caller gives
(the data plane runs each step where its model runs: in process or on a
worker), steps in dependency order and independent steps at once.

Spec: Triton's ensemble models,
https://github.com/triton-inference-server/server/blob/main/docs/user_guide/ensemble_models.md
and ``ModelEnsembling`` in
https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from inference.protocol.errors import InferenceError

logger = logging.getLogger(__name__)

#: The platform name of an ensemble (Triton's).
PLATFORM = "ensemble"
#: The key of a version's ``properties`` that holds its plan.
PROPERTY = "ensemble"


class EnsembleError(ValueError):
    """An ensemble's graph is malformed; the message says where."""


@dataclass(frozen=True)
class Step:
    """One step: ``number`` (1-based, in config order), the composing
    ``model`` and its pinned ``version``; ``configured``: the
    ``model_version`` the config gave (-1: the version serving when the
    ensemble version was created)."""

    number: int
    model: str
    version: int
    input_map: dict  # step model's input name -> ensemble tensor
    output_map: dict  # step model's output name -> ensemble tensor
    configured: int = -1

    def describe(self, ensemble: str) -> str:
        """``ensemble 'e' step 2 (model 'b' version 1)``: how errors name the step."""
        return f"ensemble '{ensemble}' step {self.number} (model '{self.model}' version {self.version})"


@dataclass(frozen=True)
class Plan:
    """An ensemble version's graph: its ``inputs`` and ``outputs`` (ensemble
    tensor names) and its ``steps``; ``waits``: step number -> the numbers
    of the steps it waits for (:func:`check_graph`)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    steps: tuple[Step, ...]
    waits: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.waits:
            object.__setattr__(self, "waits", check_graph(self.inputs, self.outputs, self.steps))

    def as_json(self) -> dict:
        """The plan as stored in a version's ``properties`` (:data:`PROPERTY`)."""
        return {
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "steps": [
                {
                    "model_name": s.model,
                    "model_version": s.version,
                    "configured_version": s.configured,
                    "input_map": dict(sorted(s.input_map.items())),
                    "output_map": dict(sorted(s.output_map.items())),
                }
                for s in self.steps
            ],
        }

    @classmethod
    def from_json(cls, doc: dict) -> Plan:
        """The plan of :meth:`as_json`; raises EnsembleError (also KeyError,
        TypeError for a document that is not one)."""
        steps = tuple(
            Step(
                number,
                str(s["model_name"]),
                int(s["model_version"]),
                dict(s["input_map"]),
                dict(s["output_map"]),
                int(s.get("configured_version", s["model_version"])),
            )
            for number, s in enumerate(doc["steps"], 1)
        )
        return cls(tuple(doc["inputs"]), tuple(doc["outputs"]), steps)

    def sha256(self) -> str:
        """The sha256 (hex) of the plan's canonical JSON: an ensemble
        version's identity, as a file's bytes are an ONNX version's."""
        text = json.dumps({"platform": PLATFORM, **self.as_json()}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def pins(self) -> set[tuple[str, int]]:
        """The (model, version) pairs the plan runs."""
        return {(s.model, s.version) for s in self.steps}


def plan_of(properties: dict | None) -> Plan | None:
    """The plan kept in a version's ``properties``, or None (not an
    ensemble, or a plan that does not read: then the version cannot serve)."""
    doc = (properties or {}).get(PROPERTY)
    if not doc:
        return None
    try:
        return Plan.from_json(doc)
    except (EnsembleError, KeyError, TypeError, ValueError):
        return None


def check_graph(inputs, outputs, steps) -> dict[int, frozenset[int]]:
    """Check an ensemble's graph and give, for each step number, the numbers
    of the steps it waits for (those that write a tensor it reads).

    ``inputs``/``outputs``: the ensemble's tensor names; ``steps``: objects
    with ``number``, ``model``, ``input_map`` and ``output_map`` (as
    :class:`Step`). Raises EnsembleError when a tensor is written twice (or
    an ensemble input is written), a step reads a tensor that is neither an
    ensemble input nor written by a step, the steps form a cycle, or an
    ensemble output is written by no step.
    """
    inputs = set(inputs)
    writer: dict[str, int] = {}
    for step in steps:
        for tensor in step.output_map.values():
            where = f"step {step.number} (model '{step.model}')"
            if tensor in inputs:
                raise EnsembleError(f"{where} writes '{tensor}', which is an input of the ensemble")
            if tensor in writer:
                raise EnsembleError(f"{where} writes '{tensor}', which step {writer[tensor]} writes too")
            writer[tensor] = step.number
    waits: dict[int, frozenset[int]] = {}
    for step in steps:
        needed = set()
        for name, tensor in step.input_map.items():
            if tensor in inputs:
                continue
            if tensor not in writer:
                raise EnsembleError(
                    f"step {step.number} (model '{step.model}') reads '{tensor}' (into its input '{name}'), "
                    "which is neither an input of the ensemble nor written by a step"
                )
            if writer[tensor] == step.number:
                raise EnsembleError(f"step {step.number} (model '{step.model}') reads '{tensor}', which it writes")
            needed.add(writer[tensor])
        waits[step.number] = frozenset(needed)
    done: set[int] = set()
    remaining = dict(waits)
    while remaining:
        ready = [n for n, need in remaining.items() if need <= done]
        if not ready:
            raise EnsembleError(f"the steps form a cycle: steps {', '.join(map(str, sorted(remaining)))}")
        for number in ready:
            done.add(number)
            del remaining[number]
    missing = [name for name in outputs if name not in writer]
    if missing:
        raise EnsembleError(f"no step writes the ensemble output(s) {', '.join(missing)}")
    return waits


#: Runs one step: (the step, its inputs by the step model's input names) -> its outputs by the step model's names.
StepRunner = Callable[[Step, dict], dict]

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
#: Threads that run the independent steps of ensembles at once (the first ready step runs in the caller's thread).
POOL_THREADS = 32


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="ensemble-step")
    return _pool


class StepFailed(Exception):
    """Raised by a step runner that ran several steps at once (a segment on
    one worker): ``step`` failed with ``cause`` (:func:`step_error` names it)."""

    def __init__(self, step: Step, cause: Exception):
        super().__init__(step, cause)
        self.step, self.cause = step, cause


def step_error(ensemble: str, step: Step, exc: Exception) -> InferenceError:
    """The error of a failed step, of the step's category (an InvalidInput
    stays an InvalidInput: 400), its message naming the step first (the step
    a :class:`StepFailed` names, when ``exc`` is one)."""
    if isinstance(exc, StepFailed):
        step, exc = exc.step, exc.cause
    where = step.describe(ensemble)
    if isinstance(exc, InferenceError):
        error = copy.copy(exc)
        error.message = f"{where}: {exc.message}"
        error.args = (error.message,)
        return error
    logger.error("%s failed", where, exc_info=exc)
    return InferenceError(f"{where}: internal error ({type(exc).__name__})")


def run(name: str, plan: Plan, feeds: dict[str, np.ndarray], run_step: StepRunner) -> dict[str, np.ndarray]:
    """Run ``plan`` (of the ensemble ``name``) on ``feeds`` (ensemble input
    name -> array) and return every ensemble tensor by name (the outputs
    among them).

    A step starts as soon as the steps it waits for have finished; steps
    ready together run at once (one in this thread, the others in a shared
    pool). ``run_step(step, inputs)`` runs one step and returns its outputs
    by the step model's output names (it must return each output of the
    step's ``output_map``). A plan's steps may also be units that run
    several steps at once (:class:`~inference.ensembles.segments.Segment`,
    their maps naming ensemble tensors by themselves). The first failure
    stops the graph (steps already running finish unobserved) and raises
    :func:`step_error`.
    """
    tensors = dict(feeds)
    by_number = {step.number: step for step in plan.steps}
    waits = plan.waits
    started: set[int] = set()
    finished: set[int] = set()
    running: dict[Future, Step] = {}

    def call(step: Step) -> dict:
        inputs = {name_: tensors[tensor] for name_, tensor in step.input_map.items()}
        return run_step(step, inputs)

    def keep(step: Step, outputs: dict) -> None:
        for output, tensor in step.output_map.items():
            if output not in outputs:
                raise InferenceError(f"{step.describe(name)}: it returned no output '{output}'")
            tensors[tensor] = outputs[output]
        finished.add(step.number)

    def collect(futures) -> None:
        for future in futures:
            step = running.pop(future)
            try:
                outputs = future.result()
            except Exception as exc:
                raise step_error(name, step, exc) from None
            keep(step, outputs)

    try:
        while len(finished) < len(by_number):
            ready = [s for n, s in by_number.items() if n not in started and waits[n] <= finished]
            for step in ready[1:]:
                started.add(step.number)
                running[_shared_pool().submit(call, step)] = step
            if ready:
                step = ready[0]
                started.add(step.number)
                try:
                    outputs = call(step)
                except Exception as exc:
                    raise step_error(name, step, exc) from None
                keep(step, outputs)
                collect([f for f in running if f.done()])
                continue
            if not running:  # cannot happen after check_graph; never spin
                raise InferenceError(f"ensemble '{name}': steps {sorted(set(by_number) - finished)} cannot run")
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            collect(done)
    finally:
        for future in running:
            future.cancel()
    return tensors
