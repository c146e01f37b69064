"""The table of progressive rollouts (docs/rollouts.md "Progressive rollouts").

A :class:`Rollout` moves a model's unversioned requests from the version
label ``stable`` to the version label ``canary`` in steps of traffic weight,
judging the canary against the stable version at the end of each step from
the per-minute rollups (:mod:`models_store.rollouts.analysis`). Its
``status`` is written by :mod:`models_store.rollouts.services` only, with a
conditional update on ``revision`` so that two processes never both advance
one step.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

#: The default steps of traffic weight (percent of the unversioned requests the canary gets).
DEFAULT_STEPS = [5, 25, 50, 100]
DEFAULT_PAUSE_SECONDS = 300.0
DEFAULT_MAX_ERROR_RATE = 0.05
DEFAULT_MAX_P99_RATIO = 1.5
DEFAULT_P99_TOLERANCE_MS = 1.0
DEFAULT_MIN_REQUESTS = 50


class RolloutStatus(models.TextChoices):
    RUNNING = "running"
    PAUSED = "paused"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"


#: A rollout in one of these holds its model (one per model).
ACTIVE = (RolloutStatus.RUNNING, RolloutStatus.PAUSED)


class Rollout(models.Model):
    """A progressive rollout of ``canary_version`` of ``model`` from
    ``stable_version`` (version numbers). ``steps``: the canary's weights in
    percent, increasing, ending at 100; ``step``: the index of the current
    one, which began at ``step_started_at`` and is judged at ``judge_at``
    (its end plus the rollups' flush delay; later when extended).
    ``baseline``: the rollups' totals of both versions already counted in
    the step's first minute when it began (subtracted at the judgement).
    ``analyses``: every judgement, oldest first (the numbers seen and the
    verdict: ``advance``, ``promote``, ``rollback`` or ``extend``)."""

    model = models.ForeignKey("models_store.RegisteredModel", related_name="rollouts", on_delete=models.CASCADE)
    canary_version = models.PositiveIntegerField()
    stable_version = models.PositiveIntegerField()
    steps = models.JSONField(default=list)
    pause_seconds = models.FloatField(default=DEFAULT_PAUSE_SECONDS)
    max_error_rate = models.FloatField(default=DEFAULT_MAX_ERROR_RATE)
    max_p99_ratio = models.FloatField(default=DEFAULT_MAX_P99_RATIO)
    p99_tolerance_ms = models.FloatField(default=DEFAULT_P99_TOLERANCE_MS)
    min_requests = models.PositiveIntegerField(default=DEFAULT_MIN_REQUESTS)
    force = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=RolloutStatus.choices, default=RolloutStatus.RUNNING)
    step = models.PositiveIntegerField(default=0)
    step_started_at = models.DateTimeField(null=True, blank=True)
    judge_at = models.DateTimeField(null=True, blank=True, db_index=True)
    baseline = models.JSONField(default=dict, blank=True)
    analyses = models.JSONField(default=list, blank=True)
    reason = models.TextField(blank=True)
    revision = models.PositiveIntegerField(default=0)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="+", null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["model"], condition=Q(status__in=["running", "paused"]), name="one_active_rollout_per_model"
            )
        ]

    def __str__(self) -> str:
        return f"{self.model.name}: v{self.stable_version} -> v{self.canary_version} ({self.status})"

    @property
    def weight(self) -> int:
        """The canary's weight of the current step (percent)."""
        return self.steps[self.step] if self.steps else 0

    @property
    def active(self) -> bool:
        return self.status in ACTIVE
