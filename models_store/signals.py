"""``registry_changed`` is sent after a registry write commits, in the process
that made it; other processes notice through the change stamp."""

from django.dispatch import Signal

registry_changed = Signal()
