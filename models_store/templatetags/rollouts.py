"""``{% load rollouts %}{% rollout_panel model %}``: the "Rollout" panel of a
model page (:func:`models_store.rollouts.views.panel`), so that the registry's
pages draw it without importing the rollouts package."""

from __future__ import annotations

from django import template

from models_store.rollouts import views

register = template.Library()


@register.inclusion_tag("models_store/_rollout.html", takes_context=True)
def rollout_panel(context, model) -> dict:
    return {**views.panel(context["request"].user, model), "csrf_token": context.get("csrf_token")}
