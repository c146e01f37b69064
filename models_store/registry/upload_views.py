"""The web UI's upload pages: a new model's first version, the next version
of a model. The file streams into the store's staging area while it is
received (:func:`models_store.intake.services.receive`), is checked, and
becomes the next version (the same checks as the management API); XHR posts
(the page's drag and drop with progress) get JSON."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from models_store import outages
from models_store.accounts import selectors as accounts
from models_store.errors import Refused, UploadRefused
from models_store.intake import services as intake
from models_store.registry import views
from models_store.registry.forms import UploadForm


def _wants_json(request) -> bool:
    return request.headers.get("X-Requested-With") == "XMLHttpRequest"


def _receive(request, name: str | None) -> HttpResponse:
    """GET: the upload form (new model, or new version of ``name``). POST: the file streams into the
    staging area, is checked, becomes the next version; XHR posts get JSON (``{"redirect"}``/``{"error"}``)."""
    handler = intake.receive(request=request) if request.method == "POST" else None
    try:
        return _upload(request, name, handler)
    finally:
        if handler is not None:
            handler.discard()


@csrf_exempt  # the CSRF check runs in _upload, after the upload handler is in place
@login_required
@accounts.endpoint(GET="models.list", POST="model.create")
def upload(request):
    """A new model's first version (for a team the user may create models in)."""
    return _receive(request, None)


@csrf_exempt  # the CSRF check runs in _upload, after the upload handler is in place
@login_required
@accounts.endpoint(GET="model.view", POST="version.upload")
def upload_version(request, name: str):
    """The next version of model ``name``."""
    return _receive(request, name)


def _upload_teams(request) -> list[str]:
    return list(accounts.teams_allowing(request.user, "model.create").values_list("name", flat=True))


@csrf_protect
def _upload(request, name: str | None, handler) -> HttpResponse:
    model = views.page_model(request, name) if name else None
    teams = _upload_teams(request)
    form_kwargs = {"teams": teams, "existing_model": name}
    if request.method != "POST":
        return _upload_page(request, model, UploadForm(**form_kwargs))
    form = None
    try:
        if name:
            intake.check_upload(user=request.user, token=None, model_name=name)
        elif request.POST.get("team"):  # a team the user may not create models in: 403, not "not a valid choice"
            intake.check_new_model(user=request.user, token=None, team_name=request.POST["team"])
        try:
            form = UploadForm(request.POST, request.FILES, **form_kwargs)
        except OSError as exc:
            if outages.no_space(exc):
                raise  # 507 below, not the client's fault
            raise UploadRefused(f"the upload was interrupted: {exc}") from None
        staged = handler.result(required=False)  # an ensemble's upload is its config alone
        if not form.is_valid():
            return _upload_failed(request, model, form, views.form_errors(form), 400)
        data = form.cleaned_data
        version = intake.upload(
            user=request.user,
            token=None,
            model_name=name or data["name"],
            staged=staged,
            team_name=data.get("team", ""),
            description=data.get("description", ""),
            config=data.get("config", ""),
        )
    except Refused as exc:
        return _upload_failed(request, model, form or UploadForm(**form_kwargs), str(exc), views.refusal_status(exc))
    except Exception as exc:
        outage = outages.http_answer(exc)  # a dependency down (503), a full disk (507)
        if outage is None:
            raise
        status, message, headers = outage
        response = _upload_failed(request, model, form or UploadForm(**form_kwargs), message, status)
        for key, value in headers.items():
            response[key] = value
        return response
    url = reverse("version-detail", kwargs={"name": version.model.name, "number": version.number})
    if _wants_json(request):
        return JsonResponse({"redirect": url, "model": version.model.name, "version": version.number}, status=201)
    messages.success(request, f"Uploaded version {version.number} of {version.model.name}.")
    return redirect(url)


def _upload_page(request, model, form, status: int = 200, error: str = "") -> HttpResponse:
    context = {"model": model, "form": form, "error": error}
    return render(request, "models_store/upload.html", context, status=status)


def _upload_failed(request, model, form, error: str, status: int) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse({"error": error}, status=status)
    return _upload_page(request, model, form, status, error)
