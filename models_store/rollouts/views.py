"""The web UI of rollouts: the "Rollout" panel of the model page
(:func:`panel`, drawn by the ``rollout_panel`` template tag), the model's
rollouts page, and the posts of the panel's forms (start; pause, resume,
promote, abort). Every change goes through
:mod:`models_store.rollouts.actions` (the management API's checks); a
refused one shows the rollouts page with the message and its 4xx status."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from models_store.accounts import selectors as accounts
from models_store.errors import NotFound, Refused, http_status
from models_store.registry import selectors as registry
from models_store.rollouts import actions, selectors
from models_store.rollouts.forms import RolloutStartForm

ROLLOUTS_ON_PAGE = 20


def panel(user, model, form=None) -> dict:
    """What the panel shows of ``model``: its active rollout or else its
    latest one, the start form (READY versions but the stable one), whether ``user`` may change it."""
    rollout = selectors.active_rollout(model) or selectors.rollouts_of(model).first()
    stable = registry.label_numbers(model).get("stable")
    versions = sorted((n for n in registry.ready_versions(model) if n != stable), reverse=True)
    return {
        "model": model,
        "rollout": rollout,
        "start_form": form or RolloutStartForm(versions=versions),
        "can_change": accounts.can_change_model(user, model, action="rollout.manage"),
    }


def _model(request, name: str):
    try:
        return actions.visible_model(request.user, None, name)
    except NotFound as exc:
        raise Http404(str(exc)) from None


def _page(request, name: str, *, status: int = 200, form=None, error: str = ""):
    model = _model(request, name)
    context = panel(request.user, model, form)
    context.update(rollouts=selectors.rollouts_of(model)[:ROLLOUTS_ON_PAGE], error=error)
    return render(request, "models_store/rollouts.html", context, status=status)


@login_required
@accounts.endpoint(GET="model.view")
def rollout_list(request, name: str):
    """The model's rollouts, newest first, each with its steps and analyses."""
    return _page(request, name)


@login_required
@require_POST
@accounts.endpoint(POST="rollout.manage")
def rollout_start(request, name: str):
    model = _model(request, name)
    form = RolloutStartForm(request.POST, versions=list(registry.ready_versions(model)))
    if not form.is_valid():
        errors = "; ".join(f"{field}: {' '.join(e)}" for field, e in form.errors.items())
        return _page(request, name, status=400, form=form, error=errors)
    try:
        rollout = actions.rollout_start(request.user, None, name, form.cleaned_data["canary_version"], **form.options())
    except Refused as exc:
        return _page(request, name, status=http_status(exc) or 400, form=form, error=str(exc))
    messages.success(
        request,
        f"Rolling out version {rollout.canary_version}: {rollout.weight}% of the requests that name no version.",
    )
    return redirect("model-detail", name=name)


@login_required
@require_POST
@accounts.endpoint(POST="rollout.manage")
def rollout_change(request, name: str, rollout_id: int, change: str):
    """Pause, resume, promote now or abort (one click each; promote and abort ask first)."""
    if change not in actions.CHANGES:
        raise Http404(f"unknown rollout action '{change}'")
    try:
        rollout = actions.rollout_change(request.user, None, name, rollout_id, change)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    except Refused as exc:
        return _page(request, name, status=http_status(exc) or 400, error=str(exc))
    messages.success(
        request, f"Rollout {rollout.pk} of version {rollout.canary_version}: {rollout.get_status_display().lower()}."
    )
    return redirect("model-detail", name=name)
