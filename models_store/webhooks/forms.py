"""The web UI's form of a new webhook subscription (posted with Django's CSRF token)."""

from __future__ import annotations

from django import forms

from models_store.webhooks.models import WebhookEvent


class WebhookForm(forms.Form):
    """A new webhook subscription of one of the user's teams."""

    team = forms.ChoiceField(choices=(), help_text="whose models' events are sent")
    url = forms.URLField(
        max_length=2048,
        label="URL",
        assume_scheme="https",
        help_text="http(s); its host must resolve to public addresses",
    )
    events = forms.MultipleChoiceField(
        choices=WebhookEvent.choices, widget=forms.CheckboxSelectMultiple, help_text="the events to send"
    )
    description = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, teams: list[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(t, t) for t in teams]
