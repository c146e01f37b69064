"""The registry's change stamp and change notices.

Every registry write calls :func:`bump_stamp` inside its transaction: the
one-row counter moves (other machines' processes notice it when they poll),
and once the transaction commits, before the call answers, the machine's
change beacon (:mod:`inference.changes`, read by every server process before
each lookup) and ``registry_changed`` (this process's listeners) announce it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.dispatch import Signal

from inference.changes import beacon_at
from models_store.models import RegistryStamp

#: Sent after a registry write commits, in the process that made it.
registry_changed = Signal()


def bump_stamp() -> None:
    """Advance the change stamp inside the current transaction; every server
    process rebuilds its registry snapshot (and token scopes) after it."""
    updated = RegistryStamp.objects.filter(pk=1).update(counter=F("counter") + 1)
    if not updated:
        RegistryStamp.objects.get_or_create(pk=1, defaults={"counter": 1})
    transaction.on_commit(_announce_change)


def _announce_change() -> None:
    """After commit: tell every process of the machine (the change beacon, read
    before each lookup) and this process's listeners, before the call answers."""
    beacon_at(settings.VAR_DIR).bump()
    registry_changed.send(sender=RegistryStamp)
