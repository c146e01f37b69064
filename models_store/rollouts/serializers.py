"""Serializers of the management API's rollouts (docs/rollouts.md "Progressive rollouts")."""

from __future__ import annotations

from rest_framework import serializers

from models_store.rollouts import services
from models_store.rollouts.models import Rollout, RolloutStatus
from models_store.web.fields import Boolean, Integer, Number


class RolloutStartSerializer(serializers.Serializer):
    """A new rollout: the version to roll out and, each optional, its steps,
    the pause of each step and the analysis's thresholds."""

    canary_version = Integer(min_value=1, max_value=2**31 - 1, help_text="The READY version to roll out.")
    steps = serializers.ListField(
        child=Integer(min_value=1, max_value=100), min_length=1, max_length=services.MAX_STEPS, required=False,
        help_text="The canary's weight at each step, percent, increasing, ending at 100 (default [5, 25, 50, 100]).",
    )  # fmt: skip
    pause_seconds = Number(
        min_value=0.1, max_value=services.MAX_PAUSE_SECONDS, required=False,
        help_text="How long each step lasts before it is judged (seconds; default 300).",
    )  # fmt: skip
    max_error_rate = Number(
        min_value=0,
        max_value=1,
        required=False,
        help_text="The canary's highest error rate that passes (default 0.05).",
    )
    max_p99_ratio = Number(
        min_value=1, max_value=1000, required=False,
        help_text="The canary's highest p99 compute time as a multiple of the stable version's (default 1.5).",
    )  # fmt: skip
    p99_tolerance_ms = Number(
        min_value=0, max_value=3_600_000, required=False,
        help_text="A p99 at most this much above the stable version's always passes (ms; default 1).",
    )  # fmt: skip
    min_requests = Integer(
        min_value=1, max_value=10_000_000, required=False,
        help_text="Requests the canary needs in a step before it is judged; fewer extend the step (default 50).",
    )  # fmt: skip
    force = Boolean(required=False, default=False, help_text="Past the signature guard (audited as forced).")


class RolloutSerializer(serializers.ModelSerializer):
    """A rollout: its versions, steps, thresholds, state, the current step
    and every analysis (the numbers seen and the verdict)."""

    model = serializers.CharField(source="model.name", read_only=True)
    state = serializers.ChoiceField(source="status", choices=RolloutStatus.choices, read_only=True)
    steps = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    weight = serializers.IntegerField(read_only=True, help_text="The canary's weight of the current step, percent.")
    analyses = serializers.ListField(child=serializers.DictField(), read_only=True)
    started_by = serializers.SerializerMethodField()

    class Meta:
        model = Rollout
        fields = [
            "id", "model", "canary_version", "stable_version", "steps", "pause_seconds", "max_error_rate",
            "max_p99_ratio", "p99_tolerance_ms", "min_requests", "force", "state", "step", "weight",
            "step_started_at", "judge_at", "reason", "analyses", "started_by", "created_at", "ended_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_started_by(self, rollout) -> str | None:
        """Who started it (null: the user is gone)."""
        return rollout.started_by.get_username() if rollout.started_by else None
