"""Receivers that bump the registry's change stamp when who-may-call-what
changes outside the services (the Django admin editing users or team
memberships), so that every server process reloads its API token scopes.
(``registry_changed`` itself lives in :mod:`models_store.stamp`.)
"""

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save

from models_store.accounts.models import TeamMembership
from models_store.stamp import bump_stamp


def access_changed(sender, instance=None, update_fields=None, **kwargs) -> None:
    """post_save / post_delete of a user or a team membership."""
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return  # a sign-in, not a change of rights
    bump_stamp()


def connect() -> None:

    for model in (get_user_model(), TeamMembership):
        post_save.connect(access_changed, sender=model, dispatch_uid=f"access-save-{model.__name__}")
        post_delete.connect(access_changed, sender=model, dispatch_uid=f"access-delete-{model.__name__}")
