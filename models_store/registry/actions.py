"""What people do to the model store, shared by the web UI and the management API.

Each action looks up its target, checks that the user (through an API token
when given) may do it (:mod:`models_store.permissions`), and calls one
service. Errors, each with a message for the user:

- :class:`NotFound` (404): no such model, version, label or team (also an
  upload to a model that does not exist yet without the team to create it,
  and, when tokens are required, a model the caller may not see:
  :func:`visible_model`);
- :class:`~models_store.permissions.AccessDenied` (403);
- :class:`~models_store.services.RegistryError` (400: malformed), its
  subclass :class:`~models_store.services.Conflict` (409: refused by the
  registry's current state, e.g. a version policy that would serve nothing,
  a version label on a FAILED version, the same bytes uploaded twice);
- :class:`~models_store.uploads.UploadRefused` (400, or 413 for size).
"""

from __future__ import annotations

from django.db import transaction

from models_store import services
from models_store.accounts import services as accounts
from models_store.accounts.permissions import AccessDenied, can_see_model, require_change_model, require_team
from models_store.config.triton import ConfigError, TritonConfig, parse_config
from models_store.intake import ensembles
from models_store.intake.uploads import StagedFile, UploadRefused
from models_store.models import ApiToken, ModelVersion, RegisteredModel
from models_store.registry import selectors
from models_store.services import Conflict, DuplicateVersion, RegistryError
from models_store.webhooks import services as webhooks

#: The registry's version numbers are 32-bit (PositiveIntegerField).
MAX_VERSION_NUMBER = 2**31 - 1
#: Row ids (webhooks, deliveries) are 64-bit (BigAutoField).
MAX_ROW_ID = 2**63 - 1

__all__ = ["AccessDenied", "Conflict", "DuplicateVersion", "NotFound", "RegistryError", "UploadRefused", "http_status"]


class NotFound(LookupError):
    """No such model, model version, version label or team."""

    def __str__(self) -> str:
        return self.args[0] if self.args else "not found"


def http_status(exc: Exception) -> int | None:
    """The HTTP status of an action error, or None for another exception."""
    if isinstance(exc, UploadRefused):
        return exc.status
    kinds = (
        (NotFound, 404), (AccessDenied, 403), (Conflict, 409), (RegistryError, 400), (webhooks.SubscriptionRefused, 400)
    )  # fmt: skip
    for kind, status in kinds:
        if isinstance(exc, kind):
            return status
    return None


def get_model(name: str) -> RegisteredModel:
    model = selectors.model_get(name)
    if model is None:
        raise NotFound(f"unknown model '{name}'")
    return model


def get_version(model: RegisteredModel, number: int) -> ModelVersion:
    """The model's version ``number``; NotFound also for a number no version
    can have (beyond the registry's 32-bit version numbers)."""
    version = selectors.version_get(model, number) if 0 < number <= MAX_VERSION_NUMBER else None
    if version is None:
        raise NotFound(f"model '{model.name}' has no version {number}")
    return version


def visible_model(user, token: ApiToken | None, name: str) -> RegisteredModel:
    """The model called ``name`` if ``user`` (through ``token``) may see it
    (:func:`~models_store.permissions.can_see_model`); NotFound otherwise,
    the same answer as for a model that does not exist, so a team cannot
    probe other teams' model names when tokens are required."""
    model = selectors.model_get(name)
    if model is None or not can_see_model(user, model, token):
        raise NotFound(f"unknown model '{name}'")
    return model


def _changeable_model(user, token, name: str) -> RegisteredModel:
    model = visible_model(user, token, name)
    require_change_model(user, model, token)
    return model


def _require_upload_to(user, token, model: RegisteredModel) -> None:
    """Refuse an upload to an existing model the user may not change; one
    the user may not see is a name taken (Conflict), not named further."""
    if not can_see_model(user, model, token):
        raise Conflict(f"the model name '{model.name}' is taken (by a model of another team); choose another name")
    require_change_model(user, model, token)


def check_upload(user, token: ApiToken | None, model_name: str) -> None:
    """Refuse an upload to an existing model the user may not change, before
    the body is read (a new model is checked once its team is known)."""
    model = selectors.model_get(model_name)
    if model is not None:
        _require_upload_to(user, token, model)


def upload(
    user,
    token: ApiToken | None,
    model_name: str,
    staged: StagedFile | None,
    team_name: str = "",
    description: str = "",
    config: str = "",
) -> ModelVersion:
    """Upload ``staged`` as the next version of ``model_name``; a new model
    needs ``team_name`` (a team the user belongs to): without it, or with a
    team that does not exist, NotFound. ``config``: a config.pbtxt for the
    model (replacing its configuration; the new version is validated with
    it); RegistryError (400) naming what it cannot take, before anything is
    stored. An ensemble's config.pbtxt (``platform: "ensemble"``) comes
    without a file (``staged`` None): it becomes a READY version pinning
    the versions it composes (models_store/ensembles.py), or is refused
    (RegistryError 400, Conflict 409); without a file and without an
    ensemble's config, UploadRefused."""
    parsed = parse_upload_config(config)
    if parsed is not None and parsed.ensemble:
        if staged is not None:
            raise RegistryError("an ensemble is its config.pbtxt alone: send no model file with it")
        return _upload_ensemble(user, token, model_name, parsed, team_name, description)
    if staged is None:
        raise UploadRefused(
            "no model file in the upload: send the ONNX file as multipart field 'file' "
            '(or, for an ensemble, a config.pbtxt with platform: "ensemble" alone)'
        )
    _model, team = _upload_target(user, token, model_name, team_name)
    return services.version_upload(model_name, staged, user, team=team, description=description, config=parsed)


def _upload_target(user, token, model_name: str, team_name: str):
    """(the existing model the user may upload to, None) or (None, the team
    a new model is created for); NotFound, AccessDenied or Conflict otherwise."""
    model = selectors.model_get(model_name)
    team = None
    if model is not None:
        _require_upload_to(user, token, model)
    else:
        if not team_name:
            raise NotFound(
                f"unknown model '{model_name}': to create it with this upload, give the team that will own it"
            )
        team = selectors.team_get(team_name)
        if team is None:
            raise NotFound(f"unknown team '{team_name}'")
        require_team(user, team, token)
    return model, team


def _upload_ensemble(user, token, model_name: str, config, team_name: str, description: str) -> ModelVersion:
    """An ensemble's config.pbtxt as a new version of ``model_name`` (created
    for ``team_name`` when new, as :func:`upload` creates one)."""
    model, team = _upload_target(user, token, model_name, team_name)
    try:
        with transaction.atomic():
            if model is None:
                services.validate_model_name(model_name)
                ensembles.check_model(None, model_name, config)
                model = services.model_get_or_create(model_name, team, user, description)
            return ensembles.version_create(
                model, config, actor=user, source="upload: config.pbtxt", action="version.upload"
            )
    except ensembles.EnsembleRefused as exc:
        raise (Conflict if exc.conflict else RegistryError)(str(exc)) from None


def parse_upload_config(text: str) -> TritonConfig | None:
    """An upload's config.pbtxt text, parsed and checked (None when empty);
    RegistryError naming a malformed or unsupported field."""
    if not text.strip():
        return None
    try:
        config = parse_config(text, source="config.pbtxt")
    except ConfigError as exc:
        raise RegistryError(str(exc)) from None
    if any(t.label_filename for t in config.outputs):
        raise RegistryError(
            "config.pbtxt: label_filename needs its label file in the model's directory: import the model's "
            "repository directory (manage.py import_repository) to use label files"
        )
    return config


def update_model(
    user,
    token,
    name: str,
    *,
    description: str | None = None,
    policy: dict | None = None,
    instance_group: list[dict] | None = None,
    payload_logging: dict | None = None,
    force: bool = False,
):
    """Change the description, the version policy (``policy``: keys
    ``version_policy``, ``latest_versions``, ``specific_versions``), the
    instance group (where worker mode runs the model) and/or payload logging
    (``payload_logging``: keys ``payload_log_rate``, ``payload_log_max_bytes``):
    all of them or, when one is refused, none. ``force``: past the signature guard."""
    model = _changeable_model(user, token, name)
    with transaction.atomic():
        if payload_logging:
            rate = payload_logging.get("payload_log_rate", model.payload_log_rate)
            max_bytes = payload_logging.get("payload_log_max_bytes", model.payload_log_max_bytes)
            if (rate, max_bytes) != (model.payload_log_rate, model.payload_log_max_bytes):
                model = services.model_set_payload_logging(model, rate, max_bytes, actor=user)
        if instance_group is not None and instance_group != model.instance_group:
            model = services.model_set_instance_group(model, instance_group, actor=user)
        if policy:
            model = services.model_set_policy(
                model,
                policy.get("version_policy", model.version_policy),
                policy.get("latest_versions", model.latest_versions),
                policy.get("specific_versions", model.specific_versions),
                actor=user,
                force=force,
            )
        if description is not None and description != model.description:
            model = services.model_update(model, user, description=description)
    return model


def set_label(user, token, name: str, label: str, number: int, force: bool = False):
    model = _changeable_model(user, token, name)
    return services.label_set(model, label, number, actor=user, force=force)


def delete_label(user, token, name: str, label: str) -> None:
    model = _changeable_model(user, token, name)
    if not services.label_delete(model, label, actor=user):
        raise NotFound(f"model '{name}' has no version label '{label}'")


def set_traffic(user, token, name: str, weights: dict[str, int], force: bool = False) -> RegisteredModel:
    model = _changeable_model(user, token, name)
    return services.traffic_set(model, weights, actor=user, force=force)


def promote_canary(user, token, name: str, force: bool = False) -> RegisteredModel:
    model = _changeable_model(user, token, name)
    return services.traffic_promote(model, actor=user, force=force)


def rollback_canary(user, token, name: str) -> RegisteredModel:
    model = _changeable_model(user, token, name)
    return services.traffic_rollback(model, actor=user)


def retire_version(user, token, name: str, number: int) -> ModelVersion:
    model = _changeable_model(user, token, name)
    return services.version_retire(get_version(model, number), user)


def restore_version(user, token, name: str, number: int) -> ModelVersion:
    model = _changeable_model(user, token, name)
    return services.version_restore(get_version(model, number), user)


def delete_version(user, token, name: str, number: int) -> None:
    model = _changeable_model(user, token, name)
    services.version_delete(get_version(model, number), user)


def revoke_token(user, token_id: int):
    """Revoke one of the user's own API tokens (a superuser: anyone's)."""
    token = selectors.token_get(token_id)
    if token is None or (token.user_id != user.pk and not user.is_superuser):
        raise NotFound("no such API token")
    return accounts.token_revoke(token, user)


# -- webhooks -------------------------------------------------------------------------
def webhook_team(user, token: ApiToken | None, team_name: str):
    """The team ``team_name`` if ``user`` (through ``token``) may see and
    change its webhooks (its members, operators): NotFound for no such team,
    AccessDenied for another team's."""
    team = selectors.team_get(team_name)
    if team is None:
        raise NotFound(f"unknown team '{team_name}'")
    require_team(user, team, token)
    return team


def webhook_get(user, token, team_name: str, webhook_id: int):
    """One of the team's subscriptions (NotFound: none with this id in this team)."""
    team = webhook_team(user, token, team_name)
    found = team.webhooks.filter(pk=webhook_id).first() if 0 < webhook_id <= MAX_ROW_ID else None
    if found is None:
        raise NotFound(f"team {team.name} has no webhook {webhook_id}")
    return found


def webhook_create(user, token, team_name: str, url: str, events: list[str], description: str = ""):
    team = webhook_team(user, token, team_name)
    return webhooks.subscription_create(team, url, events, user, description)


def webhook_update(user, token, team_name: str, webhook_id: int, **changes):
    """Pause or resume a subscription, or change its events or description (see webhooks.subscription_update)."""
    return webhooks.subscription_update(webhook_get(user, token, team_name, webhook_id), user, **changes)


def webhook_delete(user, token, team_name: str, webhook_id: int) -> None:
    webhooks.subscription_delete(webhook_get(user, token, team_name, webhook_id), user)


def webhook_redeliver(user, token, team_name: str, webhook_id: int, delivery_id: int):
    """Send one of the subscription's deliveries again (NotFound: not one of its deliveries)."""
    subscription = webhook_get(user, token, team_name, webhook_id)
    found = subscription.deliveries.filter(pk=delivery_id).first() if 0 < delivery_id <= MAX_ROW_ID else None
    if found is None:
        raise NotFound(f"webhook {webhook_id} has no delivery {delivery_id}")
    return webhooks.redeliver(found, user)
