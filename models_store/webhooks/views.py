"""The web UI's webhooks (``/webhooks/``): the subscriptions of the user's
teams, a form to add one (its secret shown once, after the redirect), and a
page per subscription with its deliveries, every attempt and its answer,
a Redeliver button per delivery (with JavaScript it answers in the row, without
a reload), Pause/Resume and Delete buttons (Delete asks first). Changes go through
:mod:`models_store.webhooks.actions` (the checks of the management API)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from models_store.accounts import selectors as accounts
from models_store.errors import AccessDenied, NotFound, http_status
from models_store.webhooks import actions, selectors
from models_store.webhooks.forms import WebhookForm
from models_store.webhooks.models import WebhookSubscription
from models_store.webhooks.services import SubscriptionRefused

NEW_SECRET_KEY = "models_store.new_webhook_secret"
DELIVERIES_ON_PAGE = 100


def _teams(request, action: str = "webhook.view") -> list[str]:
    """The teams whose webhooks the user may see (or do ``action`` to)."""
    return list(accounts.teams_allowing(request.user, action).values_list("name", flat=True))


@login_required
@accounts.endpoint(GET="webhooks.list", POST="webhook.manage")
def webhook_list(request):
    """GET: the subscriptions of the user's teams, and the form. POST: create
    one, then redirect to its page, which shows its secret that once."""
    teams = _teams(request)
    form = WebhookForm(
        request.POST or None,
        teams=_teams(request, "webhook.manage"),
        initial={"events": ["version.ready", "version.failed"]},
    )
    status = 200
    posted_team = accounts.team_get(request.POST.get("team", "")) if request.method == "POST" else None
    error = ""
    if posted_team is not None and not accounts.can_use_team(request.user, posted_team.pk, action="webhook.manage"):
        # a team the user may not manage: 403 naming the role, not the form's "not a valid choice"
        error = accounts.refusal(request.user, "webhook.manage", posted_team.name, posted_team.pk)
        status = 403
    elif request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                created = actions.webhook_create(
                    request.user, None, data["team"], data["url"], list(data["events"]), data["description"]
                )
            except (NotFound, AccessDenied, SubscriptionRefused) as exc:
                form.add_error(None, str(exc))
                status = http_status(exc) or 400
            else:
                request.session[NEW_SECRET_KEY] = {"id": created.pk, "secret": created.secret}
                return redirect("webhook-detail", webhook_id=created.pk)
        else:
            status = 400
    subscriptions = selectors.subscriptions_of_teams(teams)
    context = {"form": form, "subscriptions": subscriptions, "teams": teams, "error": error}
    return render(request, "models_store/webhooks.html", context, status=status)


def _subscription(request, webhook_id: int) -> WebhookSubscription:
    """The subscription if it belongs to one of the user's teams, else 404."""
    found = selectors.subscription_get(webhook_id)
    if found is None or found.team.name not in _teams(request):
        raise Http404("no such webhook")
    return found


@login_required
@accounts.endpoint(GET="webhook.view")
def webhook_detail(request, webhook_id: int):
    subscription = _subscription(request, webhook_id)
    new = request.session.pop(NEW_SECRET_KEY, None)
    secret = new["secret"] if new and new.get("id") == subscription.pk else None
    deliveries = selectors.with_model_pages(selectors.deliveries(subscription)[:DELIVERIES_ON_PAGE])
    context = {"subscription": subscription, "deliveries": deliveries, "secret": secret}
    response = render(request, "models_store/webhook_detail.html", context)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
@accounts.endpoint(POST="webhook.manage")
def webhook_redeliver(request, webhook_id: int, delivery_id: int):
    subscription = _subscription(request, webhook_id)
    try:
        delivery = actions.webhook_redeliver(request.user, None, subscription.team.name, webhook_id, delivery_id)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    except AccessDenied as exc:
        raise PermissionDenied(str(exc)) from None
    said = f"Sending {delivery.event} ({delivery.message_id}) again."
    if "application/json" in request.headers.get("Accept", ""):  # site.js: the row says it, no reload
        return JsonResponse({"message": said, "state": delivery.state}, status=202)
    messages.success(request, said)
    return redirect("webhook-detail", webhook_id=webhook_id)


@login_required
@require_POST
@accounts.endpoint(POST="webhook.manage")
def webhook_pause(request, webhook_id: int):
    """Pause an active subscription, or resume a paused one."""
    subscription = _subscription(request, webhook_id)
    active = not subscription.active
    try:
        actions.webhook_update(request.user, None, subscription.team.name, webhook_id, active=active)
    except AccessDenied as exc:
        raise PermissionDenied(str(exc)) from None
    messages.success(request, f"{'Resumed' if active else 'Paused'} the webhook to {subscription.url}.")
    return redirect("webhook-detail", webhook_id=webhook_id)


@login_required
@require_POST
@accounts.endpoint(POST="webhook.manage")
def webhook_delete(request, webhook_id: int):
    subscription = _subscription(request, webhook_id)
    try:
        actions.webhook_delete(request.user, None, subscription.team.name, webhook_id)
    except AccessDenied as exc:
        raise PermissionDenied(str(exc)) from None
    messages.success(request, f"Deleted the webhook to {subscription.url}.")
    return redirect("webhook-list")
