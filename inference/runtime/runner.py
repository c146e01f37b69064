"""The model runner: the only code that calls ``session.run``.

One :class:`ModelRunner` per process serves the in-process executor (every
REST and gRPC process) and the inference workers alike. For each model
version it is asked to run, it loads ``instances`` ONNX Runtime sessions (the
instance group's ``count``: Triton's model instances) from an injected
loader, keeps them under a memory budget (:mod:`inference.runtime.residency`:
each version charged the memory its load took; least recently used versions
are unloaded first, and a version asked for less often than those it would
unload runs transiently instead), and runs each request on an idle instance
(:class:`~inference.runtime.loaded_version.LoadedVersion`):

- without dynamic batching, a request waits for an idle instance (in
  arrival order) and runs alone;
- with dynamic batching (:mod:`inference.runtime.batching`), requests are
  queued and the instances run them in batches;
- with sequence batching (:mod:`inference.runtime.sequences.batcher`), the
  requests of each sequence run in order on one instance, with the control
  inputs and implicit state the server supplies.

Deadlines (``time.monotonic()`` seconds) are guarded here, in one place: a
request whose deadline passes while it waits is not run
(DEADLINE_EXCEEDED), and a running ``session.run`` that outlives it is
stopped through ``RunOptions.terminate`` by the deadline watchdog.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np

from inference.protocol.errors import DeadlineExceeded, InferenceError, ModelNotReady
from inference.runtime.execution import RunResult, RunTarget
from inference.runtime.loaded_version import LoadedVersion
from inference.runtime.onnx import OnnxModel
from inference.runtime.queue_policy import Schedule
from inference.runtime.residency import Admission, Costs, rss_bytes
from inference.runtime.sequences.policy import SequenceRequest
from inference.runtime.warmup import first_runs, warm_up

logger = logging.getLogger(__name__)


class Transient:
    """A version loaded outside the budget for the requests at hand (``users``)."""

    __slots__ = ("users", "version")

    def __init__(self, version: LoadedVersion):
        self.version = version
        self.users = 1


class Pending:
    """A version's load on the loader thread and the requests waiting for it (``waiters``)."""

    __slots__ = ("future", "target", "waiters")

    def __init__(self, target: RunTarget):
        self.target = target
        self.waiters = 0
        self.future: Future | None = None


class ModelRunner:
    """Loads model versions on demand and runs requests on them (module doc).

    ``load(target)`` returns one new :class:`OnnxModel` (a session) for the
    target; it is called ``target.instances`` times. ``budget_bytes``
    (0: none) bounds the memory of the admitted versions, each charged what
    its load took (:class:`~inference.runtime.residency.Costs`; at least
    ``cost_factor`` x artifact size x instances until loads were measured);
    one version more may be loaded transiently at a time
    (:class:`~inference.runtime.residency.Admission`). A version larger than
    the whole budget is admitted alone. Callbacks (metrics):
    ``on_load(target, seconds)`` per load, ``on_change(loaded)`` with the
    number of loaded versions, ``on_evict(target)`` per version unloaded for
    the budget, ``on_charge(bytes)`` with the bytes charged in all, and
    ``on_wait(target, seconds, transient)`` per request that waited for a load.
    ``load_wait_seconds`` (0: none but the request's deadline) bounds a
    request's wait for a load (module doc).
    """

    def __init__(
        self,
        load: Callable[[RunTarget], OnnxModel],
        budget_bytes: int = 0,
        cost_factor: float = 2.0,
        on_load: Callable[[RunTarget, float], None] | None = None,
        on_change: Callable[[int], None] | None = None,
        drain_seconds: float = 0.0,
        on_evict: Callable[[RunTarget], None] | None = None,
        on_charge: Callable[[int], None] | None = None,
        on_wait: Callable[[RunTarget, float, bool], None] | None = None,
        memory: Callable[[], int] = rss_bytes,
        costs: Costs | None = None,
        load_wait_seconds: float = 0.0,
        release: Callable[[], object] | None = None,
        first_run: bool = False,
    ):
        """``drain_seconds``: how long a version that stopped serving keeps
        its sessions (:meth:`retain`), so that requests routed to it before
        the change, by any process, still run on it. ``memory()``: the
        memory the budget counts, in bytes, read before and after each load
        (the process's RSS; on a GPU worker the GPU's used memory, with
        ``costs`` a :class:`~inference.runtime.gpu_memory.GpuCosts`).
        ``release()``: hands memory freed by unloaded versions back to the
        system (:func:`~inference.runtime.residency.release_freed_memory`),
        called before and after each load so that what a load is charged is
        what its sessions hold; a growth of half the artifact's size is then
        a measurement (without it, anything less than the size is taken for
        reused memory). ``first_run``: each instance of a version without
        ``model_warmup`` runs zeros once at load
        (:func:`~inference.runtime.warmup.first_runs`; SESSION_FIRST_RUN)."""
        self._load = load
        self.budget = budget_bytes
        self.cost_factor = cost_factor
        self._release = release
        self._first_runs = first_run
        self.costs = costs or Costs(cost_factor, credible=0.5 if release else 1.0)
        self.admission = Admission()
        self._on_load = on_load
        self._on_change = on_change
        self._on_evict = on_evict
        self._on_charge = on_charge
        self._on_wait = on_wait
        self._memory = memory
        self.drain_seconds = drain_seconds
        self._loaded: dict[tuple, LoadedVersion] = {}
        self._transient: dict[tuple, Transient] = {}
        self._transient_slot = threading.Lock()  # one transient version at a time
        self._measure = threading.Lock()  # loads one at a time, so that RSS growth is theirs
        self._lock = threading.Lock()
        self.load_wait_seconds = load_wait_seconds
        self._pending: dict[tuple, Pending] = {}  # loads queued or under way on the loader thread
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="session-load")
        self._pinned: set = set()  # keys of the always-loaded versions (keep_loaded)
        self._kept = False  # keep_loaded was called: later calls load in the background
        self._serving: set | None = None  # the keys of the last retain()
        self._draining: dict[tuple, float] = {}  # key -> when it is unloaded (time.monotonic())
        self._sweeper: threading.Timer | None = None
        self.counts = dict.fromkeys(
            ("loads", "transient_loads", "evictions", "hits", "misses", "warmups", "first_runs"), 0
        )

    # -- running ---------------------------------------------------------
    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, sequence: SequenceRequest | None = None, schedule: Schedule | None = None,
    ) -> RunResult:  # fmt: skip
        """Run one request of ``rows`` batch rows on ``target`` (loading it
        first if needed; ``sequence``: its place in a sequence, for a model
        with sequence batching; ``schedule``: its priority and timeout, for
        a model with dynamic batching). Raises ModelNotReady when it cannot
        load, DeadlineExceeded, InvalidInput (inputs the model refuses, a
        sequence not started), and the dynamic batcher's QueueFull and
        queue timeout (:mod:`inference.runtime.batching`)."""
        if self.budget:
            self.admission.touch(target.key)
        version = self._loaded_as(target)
        if version is not None:
            if self.budget:
                self.counts["hits"] += 1
            version.last_used = time.monotonic()
            return version.run(feeds, output_names, rows, deadline, sequence, schedule)
        started = time.perf_counter()
        version, transient = self._get(target, deadline)
        if self.budget:
            self.counts["misses"] += 1
        if self._on_wait:
            self._on_wait(target, time.perf_counter() - started, transient)
        version.last_used = time.monotonic()
        try:
            return version.run(feeds, output_names, rows, deadline, sequence, schedule)
        finally:
            if transient:
                self._leave_transient(target.key)

    def _get(
        self, target: RunTarget, deadline: float | None = None, bounded: bool = True
    ) -> tuple[LoadedVersion, bool]:
        """The target's loaded version, loading it if needed (on the loader
        thread, waiting at most :meth:`_bound` when ``bounded``); true when it is transient."""
        key = target.key
        with self._lock:
            version = self._loaded.get(key)
            if version is not None and version.target == target:
                return version, False
            shared = self._transient.get(key)
            if shared is not None and shared.version.target == target:
                shared.users += 1
                return shared.version, True
            pending = self._pending.get(key)
            if pending is None or pending.target != target:
                pending = None
                if self._admit(target):
                    pending = self._pending[key] = Pending(target)
                    pending.future = self._loader.submit(self._load_resident, pending)
            if pending is not None:
                pending.waiters += 1
        if pending is None:
            return self._load_transient(target, deadline), True
        return self._wait(pending, deadline, bounded), False

    def _bound(self, deadline: float | None) -> float | None:
        """Seconds a request may wait for a load (None: no bound)."""
        bounds = [self.load_wait_seconds] if self.load_wait_seconds > 0 else []
        if deadline is not None:
            bounds.append(deadline - time.monotonic())
        return max(0.0, min(bounds)) if bounds else None

    def _gave_up(self, target: RunTarget, deadline: float | None, waited: float) -> InferenceError:
        if deadline is not None and time.monotonic() >= deadline:
            return DeadlineExceeded(
                f"the request's deadline passed while {target.describe()} was loading; it was not run"
            )
        return ModelNotReady(
            f"{target.describe()} is still loading after {waited:.3g} s (MODEL_LOAD_WAIT_SECONDS); retry"
        )

    def _wait(self, pending: Pending, deadline: float | None, bounded: bool = True) -> LoadedVersion:
        """The version ``pending`` loads, once loaded (raises its load's
        ModelNotReady, or :meth:`_gave_up`'s error when the bound passes:
        then, if no request waits for it any more and it has not started,
        the load is dropped)."""
        bound = self._bound(deadline) if bounded else None
        error = None
        try:
            return pending.future.result(bound)
        except (FutureTimeout, CancelledError):
            error = self._gave_up(pending.target, deadline, bound or 0.0)
        finally:
            with self._lock:
                pending.waiters -= 1
                if not pending.waiters and not pending.future.done() and pending.future.cancel():
                    if self._pending.get(pending.target.key) is pending:
                        del self._pending[pending.target.key]
        raise error

    def _load_resident(self, pending: Pending) -> LoadedVersion:
        """On the loader thread: load ``pending.target`` and install it."""
        target = pending.target
        try:
            return self._install(target, self._load_version(target))
        finally:
            with self._lock:
                if self._pending.get(target.key) is pending:
                    del self._pending[target.key]

    def _admit(self, target: RunTarget) -> bool:
        """Whether ``target`` may stay loaded; if so, make room for it (lock held)."""
        if not self.budget:
            return True
        cost = self.costs.estimate(target.key, target.size, max(1, target.instances))
        victims, fits = self._victims(target.key, cost)
        if victims and fits and not target.sequence and target.key not in self._pinned:
            if not self.admission.admits(target.key, [v.target.key for v in victims]):
                return False
        self._unload(victims)
        return True

    def _victims(self, keep: tuple, cost: int) -> tuple[list[LoadedVersion], bool]:
        """The loaded versions (but ``keep`` and the always-loaded ones) to
        unload, least recently used first and those holding sequences last,
        so that ``cost`` more bytes fit the budget; and whether they do then
        (lock held)."""
        over = sum(v.cost for v in self._loaded.values() if v.target.key != keep) + cost - self.budget
        if over <= 0:
            return [], True
        others = sorted(
            (v for k, v in self._loaded.items() if k != keep and k not in self._pinned),
            key=lambda v: (v.sequences > 0, v.last_used),
        )
        victims = []
        for version in others:
            if over <= 0:
                break
            victims.append(version)
            over -= version.cost
        return victims, over <= 0

    def _unload(self, victims: list[LoadedVersion]) -> None:
        for version in victims:
            del self._loaded[version.target.key]
            version.close()
            self.counts["evictions"] += 1
            logger.info("unloaded %s version %s (memory budget)", version.target.model, version.target.version)
            if self._on_evict:
                self._on_evict(version.target)

    def _load_version(self, target: RunTarget) -> LoadedVersion:
        """``target.instances`` new sessions, charged what they took. Raises ModelNotReady."""
        with self._measure:
            if self._release:  # what unloaded versions held, before measuring
                self._release()
            before = self._memory()
            started = time.perf_counter()
            try:
                instances = [self._load(target) for _ in range(max(1, target.instances))]
                if target.warmup:  # Triton's model_warmup, on every instance, before the version serves
                    self.counts["warmups"] += sum(warm_up(instance, target) for instance in instances)
                elif self._first_runs:  # ONNX Runtime's first-run work at load, not in a request (zeros)
                    self.counts["first_runs"] += first_runs(instances, target)
            except InferenceError:
                raise
            except Exception as exc:
                logger.exception("loading %s failed", target.describe())
                raise ModelNotReady(f"{target.describe()} failed to load: {exc}") from None
            seconds = time.perf_counter() - started
            if self._release:  # the parser's buffers, freed: what the sessions hold stays
                self._release()
            grown = max(0, self._memory() - before) if before else 0
        cost = self.costs.charge(target.key, target.size, len(instances), grown)
        logger.info(
            "loaded %s/%s (%d instance%s%s) in %.1f ms%s",
            target.model, target.version, len(instances), "" if len(instances) == 1 else "s",
            ", sequence batching" if target.sequence else ", dynamic batching" if target.batching else "",
            seconds * 1e3, f", charged {cost / 2**20:.1f} MiB" if self.budget else "",
        )  # fmt: skip
        self.counts["loads"] += 1
        if self._on_load:
            self._on_load(target, seconds)
        return LoadedVersion(target, instances, cost)

    def _install(self, target: RunTarget, fresh: LoadedVersion) -> LoadedVersion:
        with self._lock:
            if self.budget:  # what it took may be more than it was charged before the load
                self._unload(self._victims(target.key, fresh.cost)[0])
            old = self._loaded.get(target.key)
            self._loaded[target.key] = fresh
            count = len(self._loaded)
            charged = sum(v.cost for v in self._loaded.values())
            retiring = self._serving is not None and target.key not in self._serving
            if retiring:  # loaded for a request routed before it stopped serving: it drains too
                self._draining.setdefault(target.key, time.monotonic() + self.drain_seconds)
        if retiring:
            self._sweep()
        if old is not None:  # its instance group or batching changed
            old.close()
        if self._on_change:
            self._on_change(count)
        if self._on_charge:
            self._on_charge(charged)
        return fresh

    def _load_transient(self, target: RunTarget, deadline: float | None = None) -> LoadedVersion:
        """Load ``target`` outside the budget (one at a time) for the requests
        at hand; the wait for the slot is bounded as a load's (:meth:`_bound`)."""
        bound = self._bound(deadline)
        if not self._transient_slot.acquire(timeout=-1 if bound is None else bound):
            raise self._gave_up(target, deadline, bound or 0.0)
        try:
            version = self._load_version(target)
        except BaseException:
            self._transient_slot.release()
            raise
        self.counts["transient_loads"] += 1
        with self._lock:
            self._transient[target.key] = Transient(version)
        return version

    def _leave_transient(self, key: tuple) -> None:
        with self._lock:
            shared = self._transient.get(key)
            if shared is None:
                return
            shared.users -= 1
            if shared.users:
                return
            del self._transient[key]
        shared.version.close()
        self._transient_slot.release()
        logger.debug("unloaded %s version %s (ran transiently: the budget keeps others)", key[0], key[1])

    # -- housekeeping ----------------------------------------------------
    def keep_loaded(self, targets: Iterable[RunTarget]) -> None:
        """The versions of ``targets`` are always loaded: they load now (the
        first call waits for them, so that a process is ready with them; later
        calls load the new ones on a background thread) and are never unloaded
        for the budget while they serve. A version that fails to load is
        logged and loads on its first request, as any other."""
        targets = list(targets)
        with self._lock:
            self._pinned = {t.key for t in targets}
            missing = [t for t in targets if self._loaded.get(t.key) is None or self._loaded[t.key].target != t]
            first, self._kept = not self._kept, True
        if not missing:
            return
        if first:
            self._preload(missing)
        else:
            threading.Thread(target=self._preload, args=(missing,), name="session-preload", daemon=True).start()

    def _preload(self, targets: list[RunTarget]) -> None:
        started = time.perf_counter()
        for target in targets:
            try:
                self._get(target, bounded=False)
            except InferenceError as exc:
                logger.warning("always-loaded %s did not load: %s", target.describe(), exc)
        logger.info("%d always-loaded version(s) loaded in %.1f s", len(targets), time.perf_counter() - started)

    def retain(self, keys: set) -> None:
        """The versions of ``keys`` serve; every other loaded version is
        unloaded once it has drained (``drain_seconds`` after it stopped
        serving; at once without a drain)."""
        now = time.monotonic()
        with self._lock:
            self._serving = set(keys)
            for key in self._loaded:
                if key in keys:
                    self._draining.pop(key, None)
                else:
                    self._draining.setdefault(key, now + self.drain_seconds)
        self._sweep()

    def _sweep(self) -> None:
        """Unload the versions whose drain is over; come back for the next."""
        now = time.monotonic()
        with self._lock:
            due = [k for k, until in self._draining.items() if until <= now]
            for key in due:
                del self._draining[key]
                version = self._loaded.pop(key, None)
                if version is not None:
                    version.close()
                    logger.info("unloaded %s version %s (no longer serving)", key[0], key[1])
            count = len(self._loaded)
            later = min(self._draining.values(), default=None)
            if later is not None and self._sweeper is None:
                self._sweeper = threading.Timer(max(0.0, later - now) + 0.01, self._swept)
                self._sweeper.daemon = True
                self._sweeper.start()
        if due and self._on_change:
            self._on_change(count)

    def _swept(self) -> None:
        with self._lock:
            self._sweeper = None
        self._sweep()

    def has(self, target: RunTarget) -> bool:
        """Whether ``target``'s sessions are loaded (a request for it waits for no load)."""
        return self._loaded_as(target) is not None

    def _loaded_as(self, target: RunTarget):
        """The loaded version of ``target``'s key if it was loaded as ``target`` (the same object, the
        registry's usual case, before a field-by-field comparison), else None."""
        version = self._loaded.get(target.key)
        if version is not None and (version.target is target or version.target == target):
            return version
        return None

    def loaded(self) -> list[RunTarget]:
        """Targets of the loaded versions, least recently used first."""
        with self._lock:
            return [v.target for v in sorted(self._loaded.values(), key=lambda v: v.last_used)]

    @property
    def used(self) -> int:
        """Bytes charged for the loaded versions (outside the transient one)."""
        with self._lock:
            return sum(v.cost for v in self._loaded.values())

    def close(self) -> None:
        self._loader.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for version in self._loaded.values():
                version.close()
            self._loaded.clear()
