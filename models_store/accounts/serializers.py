"""Serializers of the management API's teams: members and their roles,
service accounts and their tokens (docs/teams-and-tokens.md)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from models_store.accounts.models import ApiToken, Role, ServiceAccount, TeamMembership
from models_store.accounts.service_accounts import MAX_TOKEN_LIFETIME, tokens_of
from models_store.web.fields import Integer, TextField


class MemberSerializer(serializers.ModelSerializer):
    """A member of a team: ``source`` ``oidc`` when the identity provider's groups manage it."""

    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = TeamMembership
        fields = ["username", "role", "source", "created_at"]
        read_only_fields = fields


class MemberSetSerializer(serializers.Serializer):
    """The role to give a member (added when not one yet)."""

    role = serializers.ChoiceField(choices=Role.choices)


class TokenSerializer(serializers.ModelSerializer):
    """An API token as lists show it (never the token itself)."""

    active = serializers.BooleanField(read_only=True, help_text="Neither revoked nor expired.")
    role = serializers.ChoiceField(
        choices=Role.choices, allow_null=True, read_only=True, help_text="The most it may do (null: its user's role)."
    )

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "role", "created_at", "expires_at", "last_used_at", "revoked_at", "active"]
        read_only_fields = fields


class TokenCreatedSerializer(TokenSerializer):
    """A token just created: ``token`` is shown this once (only its hash is stored)."""

    token = serializers.CharField(read_only=True, help_text="Authorization: Bearer <token>. Shown once.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class ServiceAccountSerializer(serializers.ModelSerializer):
    """A team's service account with its tokens."""

    team = serializers.CharField(source="team.name", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)
    active = serializers.BooleanField(read_only=True)
    created_by = serializers.SerializerMethodField()
    tokens = serializers.SerializerMethodField()

    class Meta:
        model = ServiceAccount
        fields = ["id", "team", "name", "username", "description", "active", "created_by", "created_at", "tokens"]
        read_only_fields = fields

    def get_created_by(self, account) -> str | None:
        """Who created it (null: that user is gone)."""
        return account.created_by.get_username() if account.created_by else None

    @extend_schema_field(TokenSerializer(many=True))
    def get_tokens(self, account) -> list[dict]:
        """Its tokens, active first, newest first."""
        return TokenSerializer(tokens_of(account), many=True).data


#: A service account's name: as a team's (letters, digits, '_', '.', '-'; at most 64).
NAME = RegexValidator(
    r"\A[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z", "letters, digits, '_', '.' and '-', first a letter or digit"
)
#: A token's name: some text that is not only spaces.
TOKEN_NAME = RegexValidator(r"\A[^\x00]*[^\x00\s][^\x00]*\Z", "give the token a name (not only spaces)")


class ServiceAccountCreateSerializer(serializers.Serializer):
    """A new service account of the team."""

    name = TextField(
        max_length=64, trim_whitespace=False, validators=[NAME], help_text="e.g. the app that calls with it"
    )
    description = TextField(max_length=200, required=False, allow_blank=True, default="")


class ServiceAccountTokenCreateSerializer(serializers.Serializer):
    """A new token of a service account: its name, its role and its lifetime in days."""

    name = TextField(max_length=64, trim_whitespace=False, validators=[TOKEN_NAME])
    role = serializers.ChoiceField(choices=Role.choices)
    expires_in_days = Integer(
        min_value=1, max_value=MAX_TOKEN_LIFETIME.days, help_text="The token's lifetime, in days (it always has one)."
    )
