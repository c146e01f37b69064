"""The web UI's forms of people: a new API token, a team's member, a
service account and its tokens (posted with Django's CSRF token)."""

from __future__ import annotations

from django import forms

from models_store.accounts.models import Role


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


LIFETIMES = [("7d", "in 7 days"), ("30d", "in 30 days"), ("90d", "in 90 days"), ("365d", "in a year")]


class MemberForm(forms.Form):
    """Add a user to a team with a role, or change a member's role."""

    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)


class ServiceAccountForm(forms.Form):
    """A new service account of a team."""

    name = forms.CharField(max_length=64, help_text="what calls with it, e.g. 'recommender' or 'nightly-eval'")
    description = forms.CharField(max_length=200, required=False)


class ServiceAccountTokenForm(forms.Form):
    """A new token of a service account: its role and its lifetime (always one)."""

    name = forms.CharField(max_length=64)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)
    expires_in = forms.ChoiceField(label="Expires", choices=LIFETIMES, initial="90d")
