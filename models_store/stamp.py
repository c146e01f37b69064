"""The registry's change stamp and change notices.

Every registry write calls :func:`bump_stamp` inside its transaction: the
one-row counter (:class:`RegistryStamp`) moves (other machines' processes
notice it when they poll :func:`stamp_get`), and once the transaction
commits, before the call answers, the machine's change beacon
(:mod:`inference.serving.changes`, read by every server process before each lookup)
and ``registry_changed`` (this process's listeners) announce it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import F
from django.dispatch import Signal

from inference.serving.changes import beacon_at

#: Sent after a registry write commits, in the process that made it.
registry_changed = Signal()


class RegistryStamp(models.Model):
    """A single row whose ``counter`` grows with every registry write."""

    counter = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)


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


_STAMP_SQL = f"SELECT counter FROM {RegistryStamp._meta.db_table} WHERE id = 1"  # a constant: no input


def stamp_get() -> int:
    """The registry's change counter (0 before the first write).

    Plain SQL on purpose: every registry miss on the request path reads it,
    and the ORM's query building costs ~15x the query (SQLite: 236 vs 15 us).
    """
    with connection.cursor() as cursor:
        cursor.execute(_STAMP_SQL)
        row = cursor.fetchone()
    return row[0] if row else 0
