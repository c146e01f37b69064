"""The management API of a team (docs/teams-and-tokens.md): its members and
their roles, its service accounts and their tokens. Who may: the permission
table (:mod:`models_store.accounts.permissions`): members are listed to the
team's viewers and changed by its owners; service accounts are shown,
created, deactivated and given or stripped of tokens by its owners
(operators: every team). Another team's answers 403, no such team 404."""

from __future__ import annotations

from datetime import timedelta

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response

from models_store.accounts import actions
from models_store.accounts.serializers import (
    MemberSerializer,
    MemberSetSerializer,
    ServiceAccountCreateSerializer,
    ServiceAccountSerializer,
    ServiceAccountTokenCreateSerializer,
    TokenCreatedSerializer,
)
from models_store.web.api import PAGE_PARAMETERS, ManagementView
from models_store.web.openapi import errors, paginated

E403 = "your role in the team does not allow it (or the API token is limited to another team or role)"


class MemberListView(ManagementView):
    permission_actions = {"GET": "team.view"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id="teams_members_list",
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(MemberSerializer), **errors(400, 401, 403, 404, e403=E403, e404="no such team")},
    )
    def get(self, request, team: str):
        """A page of the team's members and their roles, by username."""
        return self.page(actions.members(request.user, self.token, team), MemberSerializer)


class MemberDetailView(ManagementView):
    permission_actions = {"PUT": "member.manage", "DELETE": "member.manage"}

    @extend_schema(
        operation_id="teams_members_update",
        request=MemberSetSerializer,
        responses={
            200: MemberSerializer,
            **errors(
                400,
                401,
                403,
                404,
                409,
                415,
                e403=E403,
                e404="no such team or user",
                e409="the user is a service account (it belongs to its own team only)",
            ),
        },
    )
    def put(self, request, team: str, username: str):
        """Add a user to the team with a role, or change a member's role
        (audited ``team.join`` / ``team.role``). Memberships from the identity
        provider's groups are rewritten at the member's next sign-in."""
        serializer = MemberSetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        membership = actions.member_set(request.user, self.token, team, username, serializer.validated_data["role"])
        return Response(MemberSerializer(membership).data)

    @extend_schema(
        operation_id="teams_members_destroy",
        responses={
            204: None,
            **errors(401, 403, 404, 409, e403=E403, e404="no such team or member", e409="the team's last owner"),
        },
    )
    def delete(self, request, team: str, username: str):
        """Remove a member (audited ``team.leave``); their tokens stop reaching the team's models."""
        actions.member_remove(request.user, self.token, team, username)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ServiceAccountListView(ManagementView):
    permission_actions = {"GET": "service_account.view", "POST": "service_account.manage"}

    @extend_schema(
        operation_id="teams_service_accounts_list",
        parameters=PAGE_PARAMETERS,
        responses={
            200: paginated(ServiceAccountSerializer),
            **errors(400, 401, 403, 404, e403=E403, e404="no such team"),
        },
    )
    def get(self, request, team: str):
        """A page of the team's service accounts with their tokens, by name."""
        return self.page(actions.service_account_list(request.user, self.token, team), ServiceAccountSerializer)

    @extend_schema(
        operation_id="teams_service_accounts_create",
        request=ServiceAccountCreateSerializer,
        responses={
            201: ServiceAccountSerializer,
            **errors(
                400, 401, 403, 404, 409, 415, e403=E403, e404="no such team",
                e409="the team has a service account of that name",
            ),
        },
    )  # fmt: skip
    def post(self, request, team: str):
        """Create a service account of the team (audited ``service_account.create``)."""
        serializer = ServiceAccountCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        account = actions.service_account_create(request.user, self.token, team, data["name"], data["description"])
        return Response(ServiceAccountSerializer(account).data, status=status.HTTP_201_CREATED)


class ServiceAccountDetailView(ManagementView):
    permission_actions = {"GET": "service_account.view"}

    @extend_schema(
        operation_id="teams_service_accounts_retrieve",
        responses={200: ServiceAccountSerializer, **errors(401, 403, 404, e403=E403)},
    )
    def get(self, request, team: str, account: int):
        """One service account of the team, with its tokens."""
        found = actions.service_account_get(request.user, self.token, team, account)
        return Response(ServiceAccountSerializer(found).data)


class ServiceAccountDeactivateView(ManagementView):
    permission_actions = {"POST": "service_account.manage"}

    @extend_schema(
        operation_id="teams_service_accounts_deactivate_create",
        request=None,
        responses={200: ServiceAccountSerializer, **errors(401, 403, 404, e403=E403)},
    )
    def post(self, request, team: str, account: int):
        """Deactivate the service account (idempotent): every token of it is
        refused (audited ``service_account.deactivate``); it stays listed, for the audit log."""
        found = actions.service_account_deactivate(request.user, self.token, team, account)
        return Response(ServiceAccountSerializer(found).data)


class ServiceAccountTokenListView(ManagementView):
    permission_actions = {"POST": "service_account.manage"}

    @extend_schema(
        operation_id="teams_service_accounts_tokens_create",
        request=ServiceAccountTokenCreateSerializer,
        responses={
            201: OpenApiResponse(TokenCreatedSerializer, description="The token, shown this once."),
            **errors(400, 401, 403, 404, 409, 415, e403=E403, e409="the service account is deactivated"),
        },
    )
    def post(self, request, team: str, account: int):
        """A new token of the service account, carrying a role and an expiry
        (audited ``token.create``, the actor being the caller)."""
        serializer = ServiceAccountTokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        row, plain = actions.service_account_token_create(
            request.user, self.token, team, account, data["name"], data["role"], timedelta(days=data["expires_in_days"])
        )
        row.token = plain
        return Response(TokenCreatedSerializer(row).data, status=status.HTTP_201_CREATED)


class ServiceAccountTokenDetailView(ManagementView):
    permission_actions = {"DELETE": "service_account.manage"}

    @extend_schema(
        operation_id="teams_service_accounts_tokens_destroy",
        responses={204: None, **errors(401, 403, 404, e403=E403)},
    )
    def delete(self, request, team: str, account: int, token_id: int):
        """Revoke one of the service account's tokens (audited ``token.revoke``)."""
        actions.service_account_token_revoke(request.user, self.token, team, account, token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
