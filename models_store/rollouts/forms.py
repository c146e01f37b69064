"""The web UI's form to start a rollout (posted with Django's CSRF token)."""

from __future__ import annotations

from django import forms

from models_store.rollouts import models


def parse_steps(text: str) -> list[int]:
    """``"5, 25, 50, 100"`` -> ``[5, 25, 50, 100]``; forms.ValidationError for anything but whole numbers."""
    parts = text.replace(",", " ").split()
    if not parts or not all(p.isdigit() for p in parts):
        raise forms.ValidationError("list the canary's weights (whole percentages) separated by commas")
    return [int(p) for p in parts]


class RolloutStartForm(forms.Form):
    """A new rollout: the version, its steps, the pause of each and the thresholds (error rate in percent)."""

    canary_version = forms.TypedChoiceField(coerce=int, label="Version to roll out")
    steps = forms.CharField(
        initial=", ".join(map(str, models.DEFAULT_STEPS)), label="Steps (%)",
        help_text="the canary's share of the requests that name no version, step by step; the last is 100",
    )  # fmt: skip
    pause_seconds = forms.FloatField(min_value=0.1, initial=models.DEFAULT_PAUSE_SECONDS, label="Pause per step (s)")
    max_error_rate = forms.FloatField(
        min_value=0, max_value=100, initial=models.DEFAULT_MAX_ERROR_RATE * 100, label="Max error rate (%)"
    )
    max_p99_ratio = forms.FloatField(
        min_value=1, initial=models.DEFAULT_MAX_P99_RATIO, label="Max p99 ratio", help_text="canary / stable"
    )
    min_requests = forms.IntegerField(
        min_value=1, initial=models.DEFAULT_MIN_REQUESTS, label="Min requests",
        help_text="the canary's requests before a step is judged (fewer: the step is extended)",
    )  # fmt: skip
    force = forms.BooleanField(required=False, label="Even if it breaks callers")

    def __init__(self, *args, versions: list[int] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["canary_version"].choices = [(n, f"version {n}") for n in versions]

    def clean_steps(self) -> list[int]:
        return parse_steps(self.cleaned_data["steps"])

    def options(self) -> dict:
        """The keyword arguments of :func:`models_store.rollouts.services.rollout_start` but the version."""
        data = self.cleaned_data
        return {
            "steps": data["steps"], "pause_seconds": data["pause_seconds"],
            "max_error_rate": data["max_error_rate"] / 100, "max_p99_ratio": data["max_p99_ratio"],
            "min_requests": data["min_requests"], "force": data["force"],
        }  # fmt: skip
