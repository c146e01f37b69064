"""Consecutive steps of an ensemble run on one worker as one exchange
(worker mode): the intermediate tensors stay on the worker.

:func:`fuse` finds the *segments* of a plan: chains of two or more steps
where each step after the first reads only tensors of the steps before it
in the chain (or ensemble inputs), and no step outside the chain reads a
tensor of a step but the last (so fusing never delays a step that could
have started sooner), at most :data:`SEGMENT_MAX_STEPS` steps each;
``fits(steps)`` says which steps may run together (:meth:`SegmentRunner.fits`:
a live worker holds all of their versions). A fused plan has a
:class:`Segment` in place of its steps; :meth:`SegmentRunner.runner` runs a
segment with the executor's ``run_segment`` (one message: the steps with
their maps; the worker runs them in order and returns only the tensors read
after the segment) and every other step with the ordinary step runner.

Statistics stay as Triton counts them: each composing model counts its own
inference per step (:meth:`~inference.observability.statistics.StatisticsRecorder.record_success`
from what the worker reports per step; durations measured on the worker,
the exchange's own overhead counted in the first step's compute_input).
A step that fails is named (``ensemble 'e' step 2 (model 'b' version 1):
...``) and counted as that model's failure; a failure of the exchange
itself (no worker, the link, the deadline) names the segment's first step.

Not fused (they run step by step, as in process): steps whose model has the
response cache enabled (each step's answer is kept under its own request)
or payload logging (each step's request is logged), a sequence-batching
model, a step that is itself an ensemble or does not serve now, and every
step in the embedded (in-process) mode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from inference.admission.fair_share import FairShare
from inference.ensembles.plan import Plan, Step, StepFailed
from inference.executor import WorkerExecutor
from inference.observability import metrics, tracing
from inference.observability.rollups import TRANSPORT
from inference.observability.statistics import StatisticsRecorder, failure_reason
from inference.protocol.errors import DeadlineExceeded, InferenceError
from inference.requests.jobs import Job
from inference.serving.snapshot import VersionEntry, step_entry

_now = time.perf_counter_ns

#: The most steps of one segment: a longer chain runs as several exchanges, each
#: waiting for its turn at the front end's fair-share gate (inference/admission/fair_share.py)
#: and each short on the worker, so one team's long ensemble never holds a worker
#: for long while other teams' requests wait (a 300-step chain: 19 exchanges).
SEGMENT_MAX_STEPS = 16


@dataclass(frozen=True)
class Segment:
    """Steps run as one exchange, in order; as a unit of a fused plan, its
    ``input_map`` and ``output_map`` name ensemble tensors by themselves
    (``{tensor: tensor}``): those it reads from outside, and those read
    after it (by later steps, or ensemble outputs)."""

    steps: tuple[Step, ...]
    input_map: dict
    output_map: dict

    @property
    def number(self) -> int:
        return self.steps[0].number

    def describe(self, ensemble: str) -> str:
        numbers = ", ".join(str(s.number) for s in self.steps)
        return f"ensemble '{ensemble}' steps {numbers} (run together on one worker)"


def fuse(plan: Plan, fits) -> Plan:
    """``plan`` with its segments (see module doc) as :class:`Segment` units
    (numbered by their first step; ``waits`` between units), or ``plan``
    itself when nothing fuses. ``fits(steps)``: whether these steps (a list
    of :class:`~inference.ensembles.plan.Step`) may run together on one worker."""
    readers: dict[str, set[int]] = {}
    for step in plan.steps:
        for tensor in step.input_map.values():
            readers.setdefault(tensor, set()).add(step.number)
    by_number = {step.number: step for step in plan.steps}
    unit_of: dict[int, int] = {}
    units = []
    for step in _in_order(plan):
        if step.number in unit_of:
            continue
        chain = [step]
        while (
            len(chain) < SEGMENT_MAX_STEPS
            and (follower := _follower(chain, readers, by_number, plan.waits, unit_of))
            and fits([*chain, follower])
        ):
            chain.append(follower)
        for member in chain:
            unit_of[member.number] = step.number
        units.append(step if len(chain) == 1 else _segment(chain, readers, plan.outputs))
    if len(units) == len(plan.steps):
        return plan
    members = {unit.number: unit.steps if isinstance(unit, Segment) else (unit,) for unit in units}
    waits = {
        unit.number: frozenset(unit_of[w] for s in members[unit.number] for w in plan.waits[s.number]) - {unit.number}
        for unit in units
    }
    return Plan(plan.inputs, plan.outputs, tuple(units), waits)


def _in_order(plan: Plan) -> list[Step]:
    """The steps in dependency order (config order among the ready ones)."""
    done: set[int] = set()
    order: list[Step] = []
    while len(order) < len(plan.steps):
        ready = [s for s in plan.steps if s.number not in done and plan.waits[s.number] <= done]
        order.extend(ready)
        done.update(s.number for s in ready)
    return order


def _follower(chain: list[Step], readers: dict, by_number: dict, waits: dict, unit_of: dict) -> Step | None:
    """The step that may join ``chain``: the only step reading the last
    step's tensors, reading nothing else but tensors of the chain (and
    ensemble inputs); None when there is none."""
    last = chain[-1]
    numbers = {s.number for s in chain}
    reading = set().union(*(readers.get(t, set()) for t in last.output_map.values())) - numbers
    if len(reading) != 1:
        return None
    (number,) = reading
    if number in unit_of or not waits[number] <= numbers:
        return None
    return by_number[number]


def _segment(chain: list[Step], readers: dict, outputs: tuple) -> Segment:
    members = {s.number for s in chain}
    written = {t for s in chain for t in s.output_map.values()}
    reads = {t: t for s in chain for t in s.input_map.values() if t not in written}
    needed = {t: t for t in sorted(written) if t in outputs or readers.get(t, set()) - members}
    return Segment(tuple(chain), reads, needed)


class SegmentRunner:
    """Runs the segments of ensemble plans on workers (worker mode), over the
    data plane's collaborators: the remote ``executor``
    (:class:`~inference.executor.WorkerExecutor`), the fair-share gates
    (``fair``), the ``statistics`` recorder, and whether a ``response_cache``
    is configured (a step whose version uses it is not fused)."""

    def __init__(
        self, *, executor: WorkerExecutor, fair: FairShare, statistics: StatisticsRecorder, response_cache: bool
    ):
        self.executor = executor
        self.fair = fair
        self.statistics = statistics
        self.response_cache = response_cache

    def fits(self, snapshot: dict):
        """``fits`` for :func:`fuse` over the registry's ``snapshot``: steps
        run together when each may (see module doc) and a live worker serves
        the devices every one of their instance groups allows."""

        def fits(steps: list[Step]) -> bool:
            entries = [step_entry(snapshot, step) for step in steps]
            if any(not self._fusable(entry) for entry in entries):
                return False
            return bool(self.executor.segment_workers([entry.instance_group for entry in entries]))

        return fits

    def _fusable(self, entry: VersionEntry | None) -> bool:
        """Whether a step's version may run inside a segment (see module doc)."""
        return (
            entry is not None
            and entry.serving
            and entry.target is not None
            and entry.target.sequence is None
            and not (entry.response_cache and self.response_cache)
            and not entry.payload_log[0]
        )

    def runner(self, snapshot: dict, job: Job, run_step, flow: str):
        """The unit runner of a fused plan for :func:`inference.ensembles.plan.run`:
        a :class:`Segment` through the executor's ``run_segment`` (for the
        caller's ``flow``), a step with ``run_step``."""

        def run_unit(unit, inputs: dict) -> dict:
            if isinstance(unit, Segment):
                return self.run(snapshot, job, unit, inputs, flow)
            return run_step(unit, inputs)

        return run_unit

    def run(self, snapshot: dict, job: Job, segment: Segment, inputs: dict, flow: str) -> dict:
        """Run ``segment`` on ``inputs`` (ensemble tensors by name) on one worker
        and return the tensors of its ``output_map`` by name; counts each step's
        statistics. It waits for ``flow``'s turn at its first step's seats, as
        many turns as it has steps (:mod:`inference.admission.fair_share`). Raises
        :class:`~inference.ensembles.plan.StepFailed` naming the step that failed
        (the first for a failed exchange)."""
        steps = segment.steps
        entries = [step_entry(snapshot, step) for step in steps]
        started = _now()
        statistics = self.statistics
        try:
            if job.deadline is not None and job.deadline <= time.monotonic():
                raise DeadlineExceeded("the request's deadline passed before this step ran")
            gate = self.fair.gate(entries[0].target, entries[0].instance_group)
            if gate is not None:
                gate.enter(flow, job.deadline, cost=len(steps))
            try:
                with tracing.step("segment", steps=",".join(str(s.number) for s in steps)):
                    ran = self.executor.run_segment(
                        [(entry.target, step.input_map, step.output_map) for entry, step in zip(entries, steps)],
                        inputs, list(segment.output_map), job.deadline, [entry.instance_group for entry in entries],
                    )  # fmt: skip
            finally:
                if gate is not None:
                    gate.leave()
        except InferenceError as exc:
            statistics.record_failure(steps[0].model, steps[0].version, _now() - started, failure_reason(exc, True))
            _count(steps[0], exc.code.lower(), _now() - started)
            raise StepFailed(steps[0], exc) from None
        # the exchange's own time: the first step's compute_input, or the failed step's time
        overhead = max(0, _now() - started - sum(run.total_ns for run in ran.runs))
        for index, (step, run) in enumerate(zip(steps, ran.runs)):
            extra = overhead if index == 0 and ran.error is None else 0
            statistics.record_success(
                step.model, step.version, rows=run.rows, total_ns=run.total_ns + extra, queue_ns=run.queue_ns,
                input_ns=run.input_ns + extra, infer_ns=max(0, run.run_ns - run.queue_ns),
                output_ns=max(0, run.total_ns - run.input_ns - run.run_ns), batch_size=run.batch,
                executed=run.executed,
            )  # fmt: skip
            _count(step, "success", run.total_ns + extra)
        if ran.error is not None:
            failed = steps[len(ran.runs)]
            statistics.record_failure(failed.model, failed.version, overhead, failure_reason(ran.error, True))
            _count(failed, ran.error.code.lower(), overhead)
            raise StepFailed(failed, ran.error)
        return ran.outputs


def _count(step, outcome: str, ns: int) -> None:
    """A composing model's request in the request metrics (as :mod:`inference.ensembles.runs` counts its steps)."""
    metrics.count_step(TRANSPORT.get(), step.model, str(step.version), outcome, ns / 1e9)
