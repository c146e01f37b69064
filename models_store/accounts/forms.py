"""The web UI's form of a new API token (posted with Django's CSRF token)."""

from __future__ import annotations

from django import forms


class TokenForm(forms.Form):
    """A new API token, optionally limited to one team."""

    name = forms.CharField(max_length=64, help_text="what uses it, e.g. 'ci' or 'nightly-eval'")
    team = forms.ChoiceField(choices=(), required=False, help_text="limit the token to one team's models")
    expires_in = forms.ChoiceField(
        label="Expires",
        choices=[
            ("", "never"),
            ("7d", "in 7 days"),
            ("30d", "in 30 days"),
            ("90d", "in 90 days"),
            ("365d", "in a year"),
        ],
        required=False,
        help_text="an expired token is refused like a revoked one",
    )

    def __init__(self, *args, teams: list[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "all my teams"), *((t, t) for t in teams)]
