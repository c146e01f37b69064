"""Reads of rollouts: a model's rollouts, one of them, the active one, and
those whose step is due for judgement."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from models_store.rollouts.models import ACTIVE, Rollout, RolloutStatus


def rollouts_of(model) -> QuerySet[Rollout]:
    """The rollouts of ``model`` (a RegisteredModel), newest first."""
    return Rollout.objects.filter(model=model).select_related("model", "started_by").order_by("-created_at", "-id")


def rollout_of(model, rollout_id: int) -> Rollout | None:
    """``model``'s rollout with this id, or None."""
    return rollouts_of(model).filter(pk=rollout_id).first()


def active_rollout(model) -> Rollout | None:
    """``model``'s running or paused rollout, or None (a model has at most one)."""
    return rollouts_of(model).filter(status__in=ACTIVE).first()


def due(now: datetime) -> list[int]:
    """The ids of the running rollouts whose step is to be judged at ``now`` or before."""
    return list(
        Rollout.objects.filter(status=RolloutStatus.RUNNING, judge_at__lte=now)
        .order_by("judge_at")
        .values_list("pk", flat=True)
    )
