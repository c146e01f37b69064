"""The Django admin: the operator's back door to every registry model.

Edits that the services would check are checked here too (a version policy
that serves nothing, a label on a version that is not READY); every save and
delete is recorded in the audit log and bumps the registry stamp, so that
the servers follow. Versions are read-only (they are validated artifacts);
deleting one removes its artifact. A version or label that a traffic split
sends requests to cannot be deleted (the admin lists the split as what
protects it), nor a version a READY ensemble runs, nor a model with such a
version, a split sending requests, a running rollout or shadow traffic (the
admin lists them; a refusal that only shows up when the delete runs is an
error message, never a 500), nor a label of the split renamed, and the split
itself is set on the model page or the management API (audited
``traffic.set``), not here.
Tokens can only be revoked here (they are created on the web UI, which shows
them once). Webhooks are read-only here (their secrets never shown; they
are made and deleted on the web UI or the management API, audited), and
their deliveries can be sent again (the "Redeliver" action, audited).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpResponseRedirect

from models_store import audit
from models_store.accounts import services as accounts
from models_store.errors import Conflict, RegistryError
from models_store.models import (
    ApiToken,
    AuditEvent,
    ModelVersion,
    RegisteredModel,
    RegistryStamp,
    Team,
    TeamMembership,
    VersionLabel,
    WebhookAttempt,
    WebhookDelivery,
    WebhookSubscription,
)
from models_store.registry.services import models as model_services
from models_store.registry.services import routes, versions
from models_store.stamp import bump_stamp
from models_store.webhooks import services as webhooks


@transaction.atomic
def _recorded(actor, obj, action: str, **detail) -> None:
    """Record a change made in the Django admin (``action``: add, change,
    delete) and bump the stamp, so that servers and token scopes follow it."""
    model = obj if isinstance(obj, RegisteredModel) else getattr(obj, "model", None)
    version = getattr(obj, "number", None)
    if model is not None and model.pk is None:
        model = None
    audit.record(actor, f"admin.{action}", model, version, object=f"{type(obj).__name__} {obj}", **detail)
    bump_stamp()


class AuditedAdmin(admin.ModelAdmin):
    """Saves and deletes are audited (``admin.add``/``admin.change``/``admin.delete``) and bump the stamp."""

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            _recorded(request.user, obj, "change" if change else "add", fields=form.changed_data)

    def delete_model(self, request, obj):
        with transaction.atomic():
            _recorded(request.user, obj, "delete")
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


class GuardedDeletes:
    """Deletes the services refuse (:class:`~models_store.errors.Conflict`,
    409 on the API) answer the admin's way: the confirmation page lists the
    reasons as protected objects (``get_deleted_objects``), and one that
    only shows up when the delete runs (the state changed meanwhile) is
    rolled back and shown as an error message."""

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except Conflict as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.path)

    def response_action(self, request, queryset):
        try:
            return super().response_action(request, queryset)
        except Conflict as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def delete_queryset(self, request, queryset):
        with transaction.atomic():  # all or none
            for obj in queryset:
                self.delete_model(request, obj)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class MembershipInline(admin.TabularInline):
    model = TeamMembership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(AuditedAdmin):
    list_display = ["name", "description", "rate_limit_rps", "rate_limit_burst", "max_in_flight", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(TeamMembership)
class TeamMembershipAdmin(AuditedAdmin):
    list_display = ["team", "user", "role", "source", "created_at"]
    list_filter = ["team", "role", "source"]
    autocomplete_fields = ["user"]


class RegisteredModelForm(forms.ModelForm):
    class Meta:
        model = RegisteredModel
        fields = "__all__"

    def clean(self):
        data = super().clean()
        if self.instance.pk and "version_policy" in data:
            latest, specific = data.get("latest_versions") or 0, data.get("specific_versions") or []
            try:
                model_services.check_version_policy(
                    model=self.instance, policy=data["version_policy"], latest=latest, specific=specific
                )
            except RegistryError as exc:
                raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(RegisteredModel)
class RegisteredModelAdmin(GuardedDeletes, AuditedAdmin):
    form = RegisteredModelForm
    list_display = ["name", "team", "version_policy", "latest_versions", "last_version_number", "updated_at"]
    list_filter = ["team", "version_policy"]
    search_fields = ["name", "description"]
    readonly_fields = ["last_version_number", "config", "traffic", "created_by", "created_at", "updated_at"]

    def get_deleted_objects(self, objs, request):
        """Django's list of what a delete takes along, with what forbids it (ensembles, the traffic
        split, a rollout, shadow traffic: the management API's 409) as "protected"."""
        deleted, counts, perms, protected = super().get_deleted_objects(objs, request)
        for model in objs:
            protected = [*protected, *model_services.model_delete_blockers(model=model)]
        return deleted, counts, perms, protected

    def delete_model(self, request, obj):
        model_services.model_delete(model=obj, actor=request.user)


@admin.register(ModelVersion)
class ModelVersionAdmin(GuardedDeletes, ReadOnlyAdmin):
    list_display = ["model", "number", "state", "size", "uploaded_by", "created_at"]
    list_filter = ["state", "model__team"]
    search_fields = ["model__name", "sha256"]

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    def get_deleted_objects(self, objs, request):
        """Django's list of what a delete takes along, with the traffic splits
        and the ensembles that forbid it as "protected"."""
        deleted, counts, perms, protected = super().get_deleted_objects(objs, request)
        for version in objs:
            labels = version.labels.values_list("name", flat=True)
            protected = [
                *protected,
                *routes.split_blockers(model=version.model, labels=labels, what=f"version {version.number}"),
                *versions.ensemble_blockers(model=version.model, numbers=[version.number], doing="delete it"),
            ]
        return deleted, counts, perms, protected

    def delete_model(self, request, obj):
        # An operator in /admin/ is the break-glass path: past the signature guard, audited as forced.
        versions.version_delete(version=obj, actor=request.user, force=True)


class VersionLabelForm(forms.ModelForm):
    class Meta:
        model = VersionLabel
        fields = ["model", "name", "version"]

    def clean(self):
        data = super().clean()
        version, model = data.get("version"), data.get("model")
        if self.instance.pk and {"name", "model"} & set(self.changed_data):
            before = VersionLabel.objects.select_related("model").get(pk=self.instance.pk)
            if before.name in (before.model.traffic or {}):
                raise forms.ValidationError(
                    f"label '{before.name}' is in the traffic split of '{before.model.name}'; change the split first"
                )
        if version is not None and model is not None:
            if version.model_id != model.pk:
                raise forms.ValidationError(f"version {version} is not a version of {model}")
            if version.state != ModelVersion.State.READY:
                raise forms.ValidationError(f"a label may only point at a READY version; {version} is {version.state}")
        return data


@admin.register(VersionLabel)
class VersionLabelAdmin(GuardedDeletes, AuditedAdmin):
    form = VersionLabelForm
    list_display = ["model", "name", "version", "updated_at"]
    list_filter = ["model"]

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms, protected = super().get_deleted_objects(objs, request)
        for label in objs:
            protected = [*protected, *routes.split_blockers(model=label.model, labels=[label.name])]
        return deleted, counts, perms, protected

    def delete_model(self, request, obj):
        # Audited; a weight-0 entry of the split leaves it.
        routes.label_delete(model=obj.model, name=obj.name, actor=request.user)


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["name", "user", "team", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at", "expires_at", "team"]
    search_fields = ["name", "user__username", "prefix"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected API tokens")
    def revoke(self, request, queryset):
        for token in queryset.select_related("user"):
            accounts.token_revoke(token=token, actor=request.user)
        self.message_user(request, f"Revoked {queryset.count()} token(s).", messages.SUCCESS)

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor_name", "action", "model_name", "version_number"]
    list_filter = ["action"]
    search_fields = ["actor_name", "model_name"]

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(RegistryStamp)
class RegistryStampAdmin(ReadOnlyAdmin):
    list_display = ["counter", "changed_at"]

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(ReadOnlyAdmin):
    list_display = ["team", "url", "events", "active", "created_by", "created_at"]
    list_filter = ["team", "active"]
    exclude = ["secret"]

    def has_delete_permission(self, request, obj=None):
        return False  # on the web UI or the management API (audited)


class WebhookAttemptInline(admin.TabularInline):
    model = WebhookAttempt
    extra = 0
    can_delete = False
    fields = ["number", "started_at", "status_code", "duration_ms", "response_body", "error", "requested_by"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "event", "model_name", "subscription", "state", "attempt_count", "next_attempt_at"]
    list_filter = ["state", "event", "subscription__team"]
    search_fields = ["message_id", "model_name"]
    inlines = [WebhookAttemptInline]
    actions = ["redeliver"]

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Redeliver the selected deliveries (same webhook-id)")
    def redeliver(self, request, queryset):
        for delivery in queryset.select_related("subscription__team"):
            webhooks.redeliver(delivery=delivery, actor=request.user)
        self.message_user(request, f"Sending {queryset.count()} delivery(ies) again.", messages.SUCCESS)
