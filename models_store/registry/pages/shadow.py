"""The web UI's shadow traffic: the model page's form (set it, stop it) and
the comparison the shadow version's page draws (``shadow.json``: the same
answer as ``GET /api/models/<m>/shadow/``, :mod:`models_store.registry.comparisons`).
Every change goes through :mod:`models_store.registry.actions`, as the API's."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from models_store.accounts import selectors as accounts
from models_store.errors import Refused
from models_store.registry import actions, comparisons, views
from models_store.registry.forms import ShadowForm
from models_store.registry.models import ModelVersion


def ready_versions(model) -> list[int]:
    """The model's READY version numbers, highest first (the versions the form offers)."""
    numbers = model.versions.filter(state=ModelVersion.State.READY).values_list("number", flat=True)
    return sorted(numbers, reverse=True)


@login_required
@require_POST
@accounts.endpoint(POST="shadow.set")
def shadow_set(request, name: str):
    model = views.get_model(request, name)
    form = ShadowForm(request.POST, versions=ready_versions(model))
    if not form.is_valid():
        return views.model_page(request, name, status=400, error=views.form_errors(form))
    number, percent = form.cleaned_data["version"], form.cleaned_data["percent"]
    try:
        actions.set_shadow(request.user, None, name, number, percent)
    except Refused as exc:
        return views.model_page(request, name, status=views.refusal_status(exc), error=str(exc))
    messages.success(request, f"Shadow traffic: version {number} gets a copy of {percent:g}% of the requests.")
    return redirect("model-detail", name=name)


@login_required
@require_POST
@accounts.endpoint(POST="shadow.set")
def shadow_clear(request, name: str):
    try:
        cleared = actions.clear_shadow(request.user, None, name)
    except Refused as exc:
        return views.model_page(request, name, status=views.refusal_status(exc), error=str(exc))
    messages.success(request, "Stopped the shadow traffic." if cleared else "The model had no shadow traffic.")
    return redirect("model-detail", name=name)


@login_required
@accounts.endpoint(GET="model.view")
def shadow_comparison(request, name: str, number: int):
    """The comparison of version ``number``'s shadow answers with the live ones as JSON
    (``?range=hour|day|week``, default hour); 400 ``{"error": ...}`` for an unknown range."""
    model = views.get_model(request, name)
    try:
        return JsonResponse(comparisons.shadow_report(model, number, request.GET.get("range", "hour")))
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
