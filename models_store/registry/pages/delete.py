"""The web UI's model delete, the Django admin's way: ``GET
/models/<m>/delete`` is a confirmation page that lists what goes (every
version with its file, the labels, the traffic split, the rollouts' history)
and, when something forbids it, why (the management API's 409 reasons:
:func:`~models_store.registry.services.models.model_delete_blockers`), with
no button then; its form POSTs to the same URL, which deletes through
:func:`models_store.registry.actions.delete_model` (the API's checks,
audit and ``model.deleted`` webhook). It works without JavaScript."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from models_store.accounts import selectors as accounts
from models_store.errors import AccessDenied, Refused
from models_store.registry import actions, views
from models_store.registry.services import models as model_services


def _confirmation(request, name: str, *, status: int = 200, error: str = ""):
    """The confirmation page of deleting model ``name`` (404: not visible; 403: may not delete it)."""
    model = views.get_model(request, name)
    try:
        accounts.require_change_model(request.user, model, None, "model.delete")
    except AccessDenied as exc:
        return views.model_page(request, name, status=403, error=str(exc))
    context = {
        "model": model,
        "versions": list(model.versions.all()),
        "labels": list(model.labels.all()),
        "rollouts": model.rollouts.count(),
        "blockers": model_services.model_delete_blockers(model=model),
        "error": error,
    }
    return render(request, "models_store/model_delete.html", context, status=status)


@login_required
@accounts.endpoint(GET="model.delete", POST="model.delete")
def model_delete(request, name: str):
    """GET: the confirmation page. POST: delete the model (then the model
    list, with a message), or the page again with the refusal (its status)."""
    if request.method != "POST":
        return _confirmation(request, name)
    try:
        actions.delete_model(request.user, None, name)
    except Refused as exc:
        if isinstance(exc, AccessDenied):
            return views.model_page(request, name, status=403, error=str(exc))
        return _confirmation(request, name, status=views.refusal_status(exc), error=str(exc))
    messages.success(request, f"Deleted model {name} with its versions and their files.")
    return redirect("model-list")
