"""Scheduled upkeep of the model store, on a timer of the server (``serve``)
and of every inference worker that takes validation tasks (``runworker``):

- the reaper: versions left UPLOADED or VALIDATING for more than
  VALIDATION_DEADLINE_SECONDS are queued for validation again (validated
  in this process where :func:`~models_store.intake.validating.validates_here`;
  :func:`~models_store.registry.services.states.hold_stale`);
- the charts' retention: per-minute rollups older than CHART_RETENTION_DAYS
  are deleted, those older than a day folded into hours (inference/observability/rollups_db.py);
  the shadow comparisons' minutes are deleted after the same retention (inference/shadow/rollups_db.py);
- the cleanup: what an upload that failed half-way left behind (staging
  files, local artifact copies and storage-backend objects no version row
  references, a worker's cached artifacts no version uses), older than
  ORPHAN_MIN_AGE_SECONDS (the same sweep as ``manage.py cleanup_store``);
- webhook deliveries whose attempt is overdue (the process that would have
  made it ended) are scheduled again (:func:`~models_store.webhooks.services.reschedule_stale`).

And, on a timer of its own (ROLLOUT_TICK_SECONDS, :func:`start_rollouts`:
``serve`` only), the steps of progressive rollouts that are due are judged
(:func:`~models_store.rollouts.services.tick`).

Every MAINTENANCE_SECONDS; several processes doing it at once is harmless
(a version is re-queued by one reaper only; removing an orphan twice is a
no-op). A dependency that is down skips the round (one log line, see
:class:`~inference.observability.outage.DependencyWatch`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from inference.observability import rollups_db
from inference.observability.outage import DependencyWatch
from inference.shadow import rollups_db as shadow_rollups
from models_store import outages, storage
from models_store.intake.services import schedule_validation
from models_store.registry import selectors
from models_store.registry.services import states
from models_store.rollouts import services as rollouts
from models_store.webhooks import services as webhooks

logger = logging.getLogger(__name__)


def sweep(min_age: float, cache_dir: Path | None, dry_run: bool = False) -> Iterator[str]:
    """Remove (``dry_run``: only name) the orphans older than ``min_age``
    seconds: on this machine's MODEL_STORE_DIR, in the storage backend,
    and in the worker cache ``cache_dir`` when it exists here. Yields one
    line per orphan ("<path>", "<prefix>/ from the storage backend", "<path>
    from the worker cache")."""
    rows = selectors.artifacts_in_use()
    referenced = {artifact for artifact, _ in rows}
    root = storage.store_root()
    for path in storage.find_orphans(referenced, min_age):
        if not dry_run:
            storage.remove_path(path)
        yield str(path.relative_to(root))
    for prefix in storage.find_remote_orphans(referenced, min_age):
        if not dry_run:
            storage.remove_remote(prefix)
        yield f"{prefix}/ from the storage backend"
    if cache_dir is not None:
        for path in storage.find_cache_orphans(cache_dir, {sha for _, sha in rows}, min_age):
            if not dry_run:
                storage.remove_cached(path)
            yield f"{path} from the worker cache"


def run_once(cache_dir: Path | None = None) -> tuple[list[int], list[str]]:
    """One round: the reaper, then the cleanup. Returns the re-queued
    version ids and the removed orphans. Raises what a dependency raises."""
    requeued = states.hold_stale(deadline_seconds=settings.VALIDATION_DEADLINE_SECONDS)
    for version_id in requeued:
        schedule_validation(version_id=version_id)
    rollups_db.prune(settings.CHART_RETENTION_DAYS, time.time())
    rollups_db.compact(time.time())
    shadow_rollups.prune(settings.CHART_RETENTION_DAYS, time.time())
    removed = list(sweep(settings.ORPHAN_MIN_AGE_SECONDS, cache_dir))
    webhooks.reschedule_stale(grace_seconds=max(60.0, settings.MAINTENANCE_SECONDS))
    if removed:
        logger.warning("removed %d orphan(s) of interrupted uploads: %s", len(removed), ", ".join(removed[:10]))
    return requeued, removed


class Timer:
    """A daemon thread running ``work()`` every ``interval`` seconds (0:
    none); a dependency that is down skips the round with one log line
    (``what``: whose, ``retry``: what happens then)."""

    def __init__(self, interval: float, work: Callable[[], object], name: str, what: str, retry: str):
        self.interval, self.work, self.name, self.retry = interval, work, name, retry
        self.watch = DependencyWatch(what, logger)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Timer:
        if self.interval > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.work()
            except Exception as exc:
                if outages.transient(exc):
                    self.watch.failed(exc, f"{self.retry} every {self.interval:g} s")
                else:
                    logger.exception("%s failed", self.name)
            else:
                self.watch.ok()
            finally:
                close_old_connections()


def start(cache_dir: Path | None = None) -> Timer:
    """Start this process's upkeep timer (MAINTENANCE_SECONDS; 0: none)."""
    return Timer(
        settings.MAINTENANCE_SECONDS, lambda: run_once(cache_dir), "store-maintenance",
        "the model store (scheduled upkeep)", "the reaper and the cleanup retry",
    ).start()  # fmt: skip


def judge_rollouts() -> None:
    """Judge the progressive rollouts' steps that are due (:func:`models_store.rollouts.services.tick`)."""
    for rollout, outcome in rollouts.tick():
        logger.info("rollout %s: %s", rollout, outcome)


def start_rollouts() -> Timer:
    """Start this process's rollout timer (ROLLOUT_TICK_SECONDS; 0: none): the
    steps of progressive rollouts judged when due. Several processes
    (replicas) may run it at once: each step is judged by one of them."""
    return Timer(
        settings.ROLLOUT_TICK_SECONDS, judge_rollouts, "rollout-ticker", "the model store (rollouts)",
        "rollouts are judged again",
    ).start()  # fmt: skip


def start_repository_poll(work: Callable[[], object], seconds: float) -> Timer:
    """Start the ``poll`` model control mode's timer: ``work`` (a
    :class:`~models_store.intake.model_control.RepositoryPoll`'s ``run``)
    every ``seconds`` (``serve --repository-poll-secs``)."""
    return Timer(
        seconds, work, "repository-poll", "the model store (repository poll)", "the repository is read again",
    ).start()  # fmt: skip
