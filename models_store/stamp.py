"""The registry's change stamp and change notices.

Every registry write calls :func:`bump_stamp` inside its transaction: the
one-row counter (:class:`RegistryStamp`) moves (other machines' processes
notice it when they poll :func:`stamp_get`), and once the transaction
commits, before the call answers, the machine's change beacon
(:mod:`inference.serving.changes`, read by every server process before each lookup)
and ``registry_changed`` (this process's listeners) announce it.

A write that names the models it changed (``bump_stamp(changed=[...])``)
also records them (:class:`RegistryChange`, :func:`changed_models`), so
that a serving process re-reads only those models instead of the whole
registry (at 10,000 models a whole read costs each process ~0.5 s, which
the next request would wait for); a write that names none is read whole.
"""

from __future__ import annotations

from collections.abc import Iterable

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


class RegistryChange(models.Model):
    """One model a registry write changed: ``counter`` is the stamp the
    write moved to; ``model`` the model's name ("": the write changed no
    model's serving record, e.g. a token). Rows older than
    ``KEEP_CHANGES`` stamps are pruned."""

    counter = models.BigIntegerField(db_index=True)
    model = models.CharField(max_length=128, blank=True)


#: Stamps whose changed models stay recorded; a process further behind reads the registry whole.
KEEP_CHANGES = 1024


def bump_stamp(changed: Iterable[str] | None = None) -> None:
    """Advance the change stamp inside the current transaction; every server
    process rebuilds its registry snapshot (and token scopes) after it.

    ``changed``: the names of every model whose serving record the write
    changed (its versions, labels, traffic, configuration, ...), an empty
    list when it changed none (access: tokens); None when they are not
    known (every process then reads the registry whole). Naming too few is
    a bug that leaves processes serving a stale entry: name none instead."""
    updated = RegistryStamp.objects.filter(pk=1).update(counter=F("counter") + 1)
    if not updated:
        RegistryStamp.objects.get_or_create(pk=1, defaults={"counter": 1})
    if changed is not None:
        counter = stamp_get()  # this transaction's own write: the writers are serialised on the row
        names = sorted(set(changed)) or [""]
        RegistryChange.objects.bulk_create([RegistryChange(counter=counter, model=name) for name in names])
        if counter % 128 == 0:
            RegistryChange.objects.filter(counter__lte=counter - KEEP_CHANGES).delete()
    transaction.on_commit(_announce_change)


def changed_models(after: int, upto: int) -> frozenset[str] | None:
    """The names of the models the writes of stamps ``after + 1 .. upto``
    changed; None when any of those writes named none (or is no longer
    recorded): the caller reads the registry whole."""
    if upto <= after:
        return frozenset()
    if upto - after > KEEP_CHANGES // 2:
        return None
    rows = RegistryChange.objects.filter(counter__gt=after, counter__lte=upto).values_list("counter", "model")
    counters, names = set(), set()
    for counter, name in rows:
        counters.add(counter)
        if name:
            names.add(name)
    return frozenset(names) if len(counters) == upto - after else None


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
