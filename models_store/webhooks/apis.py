"""The management API's webhooks of a team (docs/webhooks.md): its
subscriptions, their deliveries (each with its attempts and their answers)
and the redeliver action. Only the team's members (and operators; a team
token: its own team) see and change them: another team's answer 403."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response

from models_store.web.api import PAGE_PARAMETERS, ManagementView
from models_store.web.openapi import LinkedResponse, OpenApiLink, errors, paginated
from models_store.webhooks import actions, selectors
from models_store.webhooks.serializers import (
    WebhookCreatedSerializer,
    WebhookCreateSerializer,
    WebhookDeliverySerializer,
    WebhookSerializer,
    WebhookUpdateSerializer,
)

LIST_WEBHOOKS = "teams_webhooks_list"
CREATE_WEBHOOK = "teams_webhooks_create"
GET_WEBHOOK = "teams_webhooks_retrieve"
UPDATE_WEBHOOK = "teams_webhooks_partial_update"
DELETE_WEBHOOK = "teams_webhooks_destroy"
LIST_DELIVERIES = "teams_webhooks_deliveries_list"
REDELIVER = "teams_webhooks_deliveries_redeliver_create"

E403 = "the team is not yours (or the API token is limited to another team)"
E404 = "no such team, webhook or delivery"


def _webhook_links(webhook: str) -> tuple[OpenApiLink, ...]:
    where = {"team": "$request.path.team", "webhook": webhook}
    return (
        OpenApiLink("GetWebhook", GET_WEBHOOK, where, description="The subscription."),
        OpenApiLink("ListDeliveries", LIST_DELIVERIES, where, description="Its deliveries and their attempts."),
        OpenApiLink("UpdateWebhook", UPDATE_WEBHOOK, where, description="Pause or resume it, change its events."),
        OpenApiLink("DeleteWebhook", DELETE_WEBHOOK, where, description="Delete the subscription."),
    )


class WebhookListView(ManagementView):
    permission_actions = {"GET": "webhook.view", "POST": "webhook.manage"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=LIST_WEBHOOKS,
        parameters=PAGE_PARAMETERS,
        responses={
            200: LinkedResponse(
                paginated(WebhookSerializer),
                description="A page of the team's webhook subscriptions.",
                links=_webhook_links("$response.body#/results/0/id"),
            ),
            **errors(400, 401, 403, 404, e403=E403, e404="no such team"),
        },
    )
    def get(self, request, team: str):
        """A page of the team's webhook subscriptions (``limit``/``offset``), oldest first."""
        found = actions.webhook_team(request.user, self.token, team)
        return self.page(selectors.subscriptions_of(found), WebhookSerializer)

    @extend_schema(
        operation_id=CREATE_WEBHOOK,
        request=WebhookCreateSerializer,
        responses={
            201: LinkedResponse(
                WebhookCreatedSerializer,
                description="Subscribed; the answer holds the signing secret, shown this once.",
                links=_webhook_links("$response.body#/id"),
            ),
            **errors(
                400, 401, 403, 404, 415, e403=E403, e404="no such team",
                e400="invalid fields, or a URL whose host does not resolve or resolves to a private, loopback "
                "or link-local address (unless WEBHOOK_ALLOWED_HOSTS lists it)",
            ),
        },
    )  # fmt: skip
    def post(self, request, team: str):
        """Subscribe a URL to events of the team's models (``version.ready``,
        ``version.failed``, ``label.moved``, ``traffic.changed``,
        ``model.deleted``). Each is POSTed signed as Standard Webhooks with
        the secret of the answer (``whsec_...``, shown once). Audited
        (``webhook.create``)."""
        serializer = WebhookCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        subscription = actions.webhook_create(
            request.user, self.token, team, data["url"], list(data["events"]), data.get("description", "")
        )
        return Response(WebhookCreatedSerializer(subscription).data, status=status.HTTP_201_CREATED)


class WebhookDetailView(ManagementView):
    permission_actions = {
        "GET": "webhook.view",
        "PATCH": "webhook.manage",
        "DELETE": "webhook.manage",
    }  # models_store.accounts.permissions

    @extend_schema(
        operation_id=GET_WEBHOOK,
        responses={200: WebhookSerializer, **errors(401, 403, 404, e403=E403, e404=E404)},
    )
    def get(self, request, team: str, webhook: int):
        """One webhook subscription of the team (without its secret)."""
        return Response(WebhookSerializer(actions.webhook_get(request.user, self.token, team, webhook)).data)

    @extend_schema(
        operation_id=UPDATE_WEBHOOK,
        request=WebhookUpdateSerializer,
        responses={200: WebhookSerializer, **errors(400, 401, 403, 404, 415, e403=E403, e404=E404)},
    )
    def patch(self, request, team: str, webhook: int):
        """Pause (``"active": false``: no new deliveries; pending ones go on)
        or resume a subscription, or change its events or description.
        Audited (``webhook.update``)."""
        serializer = WebhookUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        if "events" in data:
            data["events"] = list(data["events"])
        updated = actions.webhook_update(request.user, self.token, team, webhook, **data)
        return Response(WebhookSerializer(updated).data)

    @extend_schema(
        operation_id=DELETE_WEBHOOK,
        responses={204: None, **errors(401, 403, 404, e403=E403, e404=E404)},
    )
    def delete(self, request, team: str, webhook: int):
        """Delete a subscription and its deliveries (pending attempts are
        dropped). Audited (``webhook.delete``)."""
        actions.webhook_delete(request.user, self.token, team, webhook)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliveryListView(ManagementView):
    permission_actions = {"GET": "webhook.view"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=LIST_DELIVERIES,
        parameters=PAGE_PARAMETERS,
        responses={
            200: LinkedResponse(
                paginated(WebhookDeliverySerializer),
                description="A page of the subscription's deliveries, newest first, each with its attempts.",
                links=(
                    OpenApiLink(
                        "Redeliver",
                        REDELIVER,
                        {
                            "team": "$request.path.team",
                            "webhook": "$request.path.webhook",
                            "delivery": "$response.body#/results/0/id",
                        },
                        description="Send the delivery again.",
                    ),
                ),
            ),
            **errors(400, 401, 403, 404, e403=E403, e404=E404),
        },
    )
    def get(self, request, team: str, webhook: int):
        """A page of the subscription's deliveries, newest first: the event,
        its payload, its state and every attempt with its answer (status, the
        first bytes of the body, duration, error)."""
        subscription = actions.webhook_get(request.user, self.token, team, webhook)
        return self.page(selectors.deliveries(subscription), WebhookDeliverySerializer)


class RedeliverView(ManagementView):
    permission_actions = {"POST": "webhook.manage"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=REDELIVER,
        request=None,
        responses={
            202: OpenApiResponse(WebhookDeliverySerializer, description="Sent again shortly (PENDING)."),
            **errors(401, 403, 404, e403=E403, e404=E404),
        },
    )
    def post(self, request, team: str, webhook: int, delivery: int):
        """Send a delivery again, whatever its state, with the same
        ``webhook-id`` and a fresh retry window. Audited (``webhook.redeliver``)."""
        found = actions.webhook_redeliver(request.user, self.token, team, webhook, delivery)
        return Response(WebhookDeliverySerializer(found).data, status=status.HTTP_202_ACCEPTED)
