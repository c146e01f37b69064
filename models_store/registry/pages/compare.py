"""The web UI's version comparison and version notes: the comparison page
(``/models/<m>/compare/?a=&b=``: two versions side by side, drawn from
:func:`models_store.registry.version_compare.compare`), its charts' JSON
(``compare.json``, with the charts' ``range`` or ``from``/``to``), what a
version page's description and tags form (what the version page says of
how it differs from another version: :func:`version_compare.version_diff`).
Every change goes through :mod:`models_store.registry.actions`, as the API's."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from models_store.accounts import selectors as accounts
from models_store.errors import Refused
from models_store.registry import actions, selectors, version_compare, views
from models_store.registry.forms import VersionNotesForm


def _numbers(request, model) -> tuple[int, int]:
    """``a`` and ``b`` from the query (defaults: b the default version or the
    highest, a the one :func:`version_compare.default_counterpart` picks for
    it); ValueError for one that is not a version number."""
    numbers = [v.number for v in model.versions.all()]
    values = {}
    for key in ("a", "b"):
        text = request.GET.get(key, "").strip()
        if text and not text.isdigit():
            raise ValueError(f"{key} is a version number, not {text!r}")
        values[key] = int(text) if text else None
    if values["b"] is None:
        default = selectors.serving(model).default
        values["b"] = default if default is not None else max(numbers, default=0)
    if values["a"] is None:
        values["a"] = version_compare.default_counterpart(model, values["b"]) or values["b"]
    return values["a"], values["b"]


@login_required
@accounts.endpoint(GET="model.view")
def compare_page(request, name: str):
    """Two versions of a model side by side; 400 for a malformed number, 404 for a version the model lacks."""
    model = views.get_model(request, name)
    try:
        a, b = _numbers(request, model)
        compared = version_compare.compare(model, a, b)
    except ValueError as exc:
        context = {"model": model, "error": str(exc), "numbers": [], "compared": None}
        return render(request, "models_store/compare.html", context, status=400)
    except KeyError as exc:
        raise Http404(exc.args[0]) from None
    context = {"model": model, "compared": compared, "numbers": [v.number for v in model.versions.all()]}
    return render(request, "models_store/compare.html", context)


@login_required
@accounts.endpoint(GET="model.view")
def compare_json(request, name: str):
    """The comparison as JSON (``a``, ``b`` required; the traffic over ``range`` or ``from``/``to``);
    400 ``{"error": ...}`` for bad parameters, 404 for a version the model lacks."""
    model = views.get_model(request, name)
    try:
        numbers = [request.GET.get(key, "").strip() for key in ("a", "b")]
        if not all(n.isdigit() for n in numbers):
            raise ValueError("a and b are version numbers")
        return JsonResponse(version_compare.compare(model, int(numbers[0]), int(numbers[1]), request.GET))
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except KeyError as exc:
        return JsonResponse({"error": exc.args[0]}, status=404)


@login_required
@require_POST
@accounts.endpoint(POST="version.update")
def version_notes(request, name: str, number: int):
    """Save a version's description and tags (the version page's form)."""
    form = VersionNotesForm(request.POST)
    if not form.is_valid():
        return views.version_page(request, name, number, status=400, error=views.form_errors(form), notes_form=form)
    try:
        actions.annotate_version(
            request.user, None, name, number, description=form.cleaned_data["description"],
            tags=form.cleaned_data["tags"],
        )  # fmt: skip
    except Refused as exc:
        status = views.refusal_status(exc)
        return views.version_page(request, name, number, status=status, error=str(exc), notes_form=form)
    messages.success(request, f"Saved the description and tags of version {number}.")
    return redirect("version-detail", name=name, number=number)
