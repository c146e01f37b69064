"""The web UI's registry pages: the model list, model and version pages
(uploads: :mod:`models_store.registry.upload_views`).

Pages are plain Django templates; a little JavaScript adds drag and drop
with upload progress, the "try it" panel, state polling and copy buttons.
Every change goes through :mod:`models_store.registry.actions` (uploads:
:mod:`models_store.intake.services`; the same checks as the management
API); a refused change re-renders the page with the message and a 4xx
status, and changes nothing. Pages show only the models the user may see
(:mod:`models_store.accounts.selectors`: every model, unless
INFERENCE_REQUIRE_TOKEN is on; then a model of another team is a 404).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from inference.serving import instance_groups
from models_store import audit
from models_store.accounts import selectors as accounts
from models_store.errors import NotFound, Refused, SignatureConflict, http_status
from models_store.registry import actions, charts, comparisons, selectors, snippets, version_compare
from models_store.registry.forms import LabelForm, ModelSettingsForm, ShadowForm, VersionNotesForm
from models_store.registry.models import ModelVersion, RegisteredModel
from models_store.registry.pages import ensemble as ensemble_pages
from models_store.webhooks import selectors as webhooks

GRPC_PORT = 8001  # the default of `serve --grpc-port`, shown in the gRPC snippet
AUDIT_ON_PAGE = 100  # the newest audit events a model page shows
MODELS_PER_PAGE = 50  # rows of the models list


def refusal_status(exc: Exception) -> int:
    return http_status(exc) or 400


def _refusal(exc: Exception) -> str:
    """What a refused change says on a page (the signature guard points to the page's own checkbox)."""
    return exc.on_a_page() if isinstance(exc, SignatureConflict) else str(exc)


def form_errors(form) -> str:
    """A form's errors as one line: ``field: message; ...``."""
    parts = []
    for field, errors in form.errors.items():
        text = " ".join(errors)
        parts.append(text if field == "__all__" else f"{field}: {text}")
    return "; ".join(parts)


def describe_batching(model) -> str:
    """Triton's dynamic batching of a model in words ("" when it is off)."""
    config = (model.config or {}).get("dynamic_batching")
    if config is None:
        return ""
    levels = int(config.get("priority_levels", 0))
    policies = {"": config.get("default_queue_policy")} | {
        f"level {key}": value for key, value in sorted((config.get("priority_queue_policy") or {}).items())
    }
    queues = [f"{name}: {text}" if name else text for name, text in _queue_policies(policies)]
    if model.max_batch_size > 0:
        delay_us = int(config.get("max_queue_delay_microseconds", 0))
        parts = [
            f"batches of up to {model.max_batch_size}",
            f"waiting at most {delay_us / 1000:g} ms for a fuller batch",
        ]
    elif levels or queues:
        parts = ["one request at a time"]
    else:
        return ""
    if config.get("preferred_batch_size"):
        parts.append("preferred sizes " + ", ".join(str(int(n)) for n in config["preferred_batch_size"]))
    if config.get("preserve_ordering"):
        parts.append("answers in arrival order")
    if levels:
        parts.append(f"{levels} priority levels (default {int(config.get('default_priority_level', 0))})")
    return "; ".join(parts + queues)


def _queue_policies(policies: dict) -> list[tuple[str, str]]:
    """(whose, what it says) of each queue policy that bounds anything (Triton's ModelQueuePolicy as JSON)."""
    described = []
    for name, policy in policies.items():
        policy = policy or {}
        said = []
        if int(policy.get("max_queue_size", 0)):
            said.append(f"at most {int(policy['max_queue_size'])} queued")
        timeout_us = int(policy.get("default_timeout_microseconds", 0))
        if timeout_us:
            action = "delayed" if policy.get("timeout_action") == "DELAY" else "refused"
            override = " (a request may shorten it)" if policy.get("allow_timeout_override") else ""
            said.append(f"{action} after {timeout_us / 1000:g} ms in the queue{override}")
        if said:
            described.append((name, ", ".join(said)))
    return described


def page_model(request, name: str) -> RegisteredModel:
    """The model (prefetched) if the signed-in user may see it, else 404 (:func:`actions.visible_model`)."""
    try:
        return actions.visible_model(request.user, None, name, prefetched=True)
    except NotFound as exc:
        raise Http404(str(exc)) from None


def _versions_with_labels(model: RegisteredModel) -> list[ModelVersion]:
    """The model's (prefetched) versions, each with ``label_names``."""
    labels = selectors.version_labels(model)
    versions = list(model.versions.all())
    for version in versions:
        version.label_names = labels.get(version.pk, [])
    return versions


def _snippets(request, model: RegisteredModel, version: ModelVersion | None) -> list:
    if version is None or version.state != ModelVersion.State.READY:
        return []
    host = request.get_host()
    hostname = host if host.endswith("]") or ":" not in host else host.rsplit(":", 1)[0]
    grpc = f"{hostname}:{GRPC_PORT}"
    return snippets.snippets(
        model.name, version.number, version.inputs, version.outputs, host, grpc, settings.INFERENCE_REQUIRE_TOKEN
    )


# -- the model list -------------------------------------------------------------
@login_required
@accounts.endpoint(GET="models.list")
def model_list(request):
    """The models list: :data:`MODELS_PER_PAGE` rows a page, filtered by name,
    team and version state and sorted (query parameters as the management
    API's ``GET /api/models/``: ``name``, ``team``, ``state``, ``order``,
    and ``page``); an unknown ``order`` or ``state`` answers 400."""
    try:
        where = selectors.ModelFilter.from_params(request.GET)
    except ValueError as exc:
        return render(request, "models_store/model_list.html", {"error": str(exc), "where": None}, status=400)
    teams = accounts.visible_team_ids(request.user)
    page = Paginator(selectors.model_listing(teams, where), MODELS_PER_PAGE).get_page(request.GET.get("page"))
    rows = []
    pins = selectors.ensemble_pins()  # one query for the page
    for model in page:
        versions = _versions_with_labels(model)
        state = selectors.serving(model, pins)
        rows.append(
            {"model": model, "versions": versions, "served": state.served, "size": sum(v.size for v in versions)}
        )
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "rows": rows,
        "sparklines": charts.sparklines([row["model"].name for row in rows]),
        "page": page,
        "where": where,
        "query": query.urlencode(),
        "team_names": accounts.team_names(teams),
        "states": ModelVersion.State.values,
        "sorts": _sort_links(request.GET, where.order),
    }
    return render(request, "models_store/model_list.html", context)


def _sort_links(params, order: str) -> dict[str, dict]:
    """Per sortable column (name, team, updated): the query string that sorts
    by it (descending when it is the ascending order now) and its arrow."""
    links = {}
    for key in ("name", "team", "updated"):
        query = params.copy()
        query.pop("page", None)
        query["order"] = f"-{key}" if order == key else key
        arrow = {key: "▲", f"-{key}": "▼"}.get(order, "")
        links[key] = {"query": query.urlencode(), "arrow": arrow}
    return links


# -- the model page -------------------------------------------------------------
def _model_page(request, name: str, *, status: int = 200, settings_form=None, label_form=None, error: str = ""):
    model = page_model(request, name)
    versions = _versions_with_labels(model)
    state = selectors.serving(model)
    ready = [v.number for v in versions if v.state == ModelVersion.State.READY]
    by_number = {v.number: v for v in versions}
    shown = by_number.get(state.default) or next((v for v in versions if v.state == "READY"), None)
    group = (instance_groups.read(model.instance_group) or (instance_groups.InstanceGroup(),))[0]
    if settings_form is None:
        settings_form = ModelSettingsForm.for_model(model, group)
    context = {
        "model": model,
        "versions": versions,
        "served": state.served,
        "default_version": state.default,
        "loaded": state.loaded,
        "shown": shown,
        "can_change": accounts.can_change_model(request.user, model),
        "settings_form": settings_form,
        "instance_group": instance_groups.describe(model.instance_group),
        "dynamic_batching": describe_batching(model),
        "label_form": label_form or LabelForm(ready_versions=ready),
        "audit": audit.for_model(model)[:AUDIT_ON_PAGE],
        "webhook_deliveries": webhooks.deliveries_for_model(request.user, model),
        "traffic": _traffic_rows(model),
        "shadow": comparisons.shadow_config(model),
        "shadow_form": ShadowForm(versions=[n for n in ready if n != state.default]),
        "snippets": _snippets(request, model, shown),
        "ensemble": ensemble_pages.ensemble_view(model, versions, shown, _version_url),
        "error": error,
    }
    return render(request, "models_store/model_detail.html", context, status=status)


def _version_url(name: str, number: int) -> str:
    return reverse("version-detail", args=[name, number])


@login_required
@accounts.endpoint(GET="model.view")
def model_detail(request, name: str):
    return _model_page(request, name)


@login_required
@accounts.endpoint(GET="model.view")
def model_charts(request, name: str):
    """The model page's charts as JSON (``?range=hour|day|week``, default
    hour, or ``?from=&to=``; see :func:`models_store.registry.charts.window`): the signed-in user's
    teams' models only (404 otherwise), 400 ``{"error": ...}`` for an unknown range or a bad window."""
    model = page_model(request, name)
    try:
        data = charts.model_charts(model.name, params=request.GET)
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse(data)


@login_required
@require_POST
@accounts.endpoint(POST="model.update")
def model_settings(request, name: str):
    form = ModelSettingsForm(request.POST, platform=page_model(request, name).platform)
    if not form.is_valid():
        return _model_page(request, name, status=400, settings_form=form, error=form_errors(form))
    try:
        actions.update_model(
            request.user,
            None,
            name,
            description=form.cleaned_data["description"],
            policy=form.policy(),
            instance_group=form.instance_group(),
            payload_logging=form.payload_logging(),
            force=form.cleaned_data["force"],
            tags=form.new_tags(),
        )
    except Refused as exc:
        return _model_page(request, name, status=refusal_status(exc), settings_form=form, error=_refusal(exc))
    messages.success(request, "Saved the settings.")
    return redirect("model-detail", name=name)


@login_required
@require_POST
@accounts.endpoint(POST="label.set")
def label_set(request, name: str):
    model = page_model(request, name)
    ready = [v.number for v in model.versions.all() if v.state == ModelVersion.State.READY]
    form = LabelForm(request.POST, ready_versions=ready)
    if not form.is_valid():
        return _model_page(request, name, status=400, label_form=form, error=form_errors(form))
    try:
        data = form.cleaned_data
        actions.set_label(request.user, None, name, data["label"], data["version"], force=data["force"])
    except Refused as exc:
        return _model_page(request, name, status=refusal_status(exc), label_form=form, error=_refusal(exc))
    messages.success(request, f"Label {form.cleaned_data['label']} -> version {form.cleaned_data['version']}.")
    return redirect("model-detail", name=name)


@login_required
@require_POST
@accounts.endpoint(POST="label.delete")
def label_delete(request, name: str, label: str):
    try:
        actions.delete_label(request.user, None, name, label)
    except Refused as exc:
        return _model_page(request, name, status=refusal_status(exc), error=_refusal(exc))
    messages.success(request, f"Deleted label {label}.")
    return redirect("model-detail", name=name)


def _traffic_rows(model: RegisteredModel) -> list[dict]:
    """One row per version label: its version and its weight in the split."""
    traffic = model.traffic or {}
    return [
        {"label": label.name, "version": label.version.number, "weight": traffic.get(label.name, 0)}
        for label in model.labels.all()
    ]


@login_required
@require_POST
@accounts.endpoint(POST="traffic.set")
def traffic_set(request, name: str):
    """The traffic split form: a weight per version label (empty: 0); all
    zero or empty clears the split."""
    model = page_model(request, name)
    weights = {}
    for label in model.labels.all():
        text = request.POST.get(f"weight-{label.name}", "").strip()
        if not text:
            continue
        if not text.isdigit() or int(text) > 100:
            error = f"the weight of label {label.name} must be a whole number from 0 to 100"
            return _model_page(request, name, status=400, error=error)
        weights[label.name] = int(text)
    if not any(weights.values()):
        weights = {}
    try:
        actions.set_traffic(request.user, None, name, weights, force=request.POST.get("force") == "on")
    except Refused as exc:
        return _model_page(request, name, status=refusal_status(exc), error=_refusal(exc))
    described = ", ".join(f"{label} {weight}%" for label, weight in sorted(weights.items())) or "none"
    messages.success(request, f"Traffic split: {described}.")
    return redirect("model-detail", name=name)


@login_required
@require_POST
@accounts.endpoint(POST={"promote": "traffic.promote", "rollback": "traffic.rollback"})
def traffic_action(request, name: str, action: str):
    """Promote the canary, or roll it back (one click each)."""
    if action not in ("promote", "rollback"):
        raise Http404(f"unknown traffic action '{action}'")
    try:
        if action == "promote":
            actions.promote_canary(request.user, None, name, force=request.POST.get("force") == "on")
        else:
            actions.rollback_canary(request.user, None, name)
    except Refused as exc:
        return _model_page(request, name, status=refusal_status(exc), error=_refusal(exc))
    stable = selectors.label_numbers(selectors.model_detail(name)).get("stable")
    what = "Promoted the canary" if action == "promote" else "Rolled back"
    messages.success(request, f"{what}: every request that names no version goes to stable (version {stable}).")
    return redirect("model-detail", name=name)


# -- the version page -----------------------------------------------------------
def _version_page(request, name: str, number: int, *, status: int = 200, error: str = "", notes_form=None):
    model = page_model(request, name)
    version = next((v for v in _versions_with_labels(model) if v.number == number), None)
    if version is None:
        raise Http404(f"model '{name}' has no version {number}")
    state = selectors.serving(model)
    context = {
        "model": model,
        "version": version,
        "serving": state.serves(number),
        "not_serving_because": state.reason(number, version.state, version.reason),
        "can_change": accounts.can_change_model(request.user, model),
        "snippets": _snippets(request, model, version),
        "example_request": snippets.example_request_text(version.inputs) if version.inputs else "",
        "infer_url": f"/v2/models/{model.name}/versions/{number}/infer",
        "pending": version.state in (ModelVersion.State.UPLOADED, ModelVersion.State.VALIDATING),
        "compared": version_compare.version_diff(model, version),
        "notes_form": notes_form or VersionNotesForm.for_version(version),
        "shadow": comparisons.version_shadow(model, number),
        "error": error,
    }
    return render(request, "models_store/version_detail.html", context, status=status)


@login_required
@accounts.endpoint(GET="model.view")
def version_detail(request, name: str, number: int):
    return _version_page(request, name, number)


VERSION_ACTIONS = {
    "retire": (actions.retire_version, "Retired version {number}: it no longer serves."),
    "restore": (actions.restore_version, "Restored version {number}."),
    "delete": (actions.delete_version, "Deleted version {number} and its artifact."),
    "promote": (actions.promote_version, "Promoted version {number}: the version policy may choose it."),
}
#: The version actions the signature guard may refuse ("even if it breaks callers" on the page).
FORCEABLE = ("retire", "delete", "promote")


@login_required
@require_POST
@accounts.endpoint(
    POST={
        "retire": "version.retire", "restore": "version.restore", "delete": "version.delete",
        "promote": "version.promote",
    }
)  # fmt: skip
def version_action(request, name: str, number: int, action: str):
    if action not in VERSION_ACTIONS:
        raise Http404(f"no version action '{action}'")
    run, message = VERSION_ACTIONS[action]
    try:
        if action in FORCEABLE:
            run(request.user, None, name, number, force=request.POST.get("force") == "on")
        else:
            run(request.user, None, name, number)
    except Refused as exc:
        return _version_page(request, name, number, status=refusal_status(exc), error=_refusal(exc))
    messages.success(request, message.format(number=number))
    if action == "delete":
        return redirect("model-detail", name=name)
    return redirect("version-detail", name=name, number=number)


#: What the registry's other page modules share (pages/shadow.py, pages/compare.py).
get_model, model_page, version_page = page_model, _model_page, _version_page
