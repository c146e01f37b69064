"""Every table of the ``models_store`` app, for Django's app registry.

Each table lives with the package it belongs to; this module imports them so
that Django (migrations, the admin, ``manage.py``) finds them under the one
app label ``models_store`` (their database tables keep their names).

- :mod:`models_store.registry.models`: RegisteredModel, ModelVersion, VersionLabel;
- :mod:`models_store.accounts.models`: Team, TeamMembership, ServiceAccount, ApiToken;
- :mod:`models_store.webhooks.models`: WebhookSubscription, WebhookDelivery, WebhookAttempt;
- :mod:`models_store.rollouts.models`: Rollout;
- :mod:`models_store.audit`: AuditEvent; :mod:`models_store.stamp`: RegistryStamp, RegistryChange.
"""

from models_store.accounts.models import ApiToken, Role, ServiceAccount, Team, TeamMembership
from models_store.audit import AuditEvent
from models_store.registry.models import ModelVersion, RegisteredModel, VersionLabel, VersionPolicy
from models_store.rollouts.models import Rollout
from models_store.stamp import RegistryChange, RegistryStamp
from models_store.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEvent, WebhookSubscription

__all__ = [
    "ApiToken",
    "AuditEvent",
    "ModelVersion",
    "RegisteredModel",
    "RegistryChange",
    "RegistryStamp",
    "Role",
    "Rollout",
    "ServiceAccount",
    "Team",
    "TeamMembership",
    "VersionLabel",
    "VersionPolicy",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookSubscription",
]
