"""Pages of the management API's lists: DRF's limit/offset pagination, and
keyset pages where a list has a keyset order.

``GET /api/models/?limit=50&offset=100`` answers ``{"count": <total>,
"next": <url or null>, "previous": <url or null>, "results": [...]}``;
without ``limit`` a page holds :data:`DEFAULT_LIMIT` items, and at most
:data:`MAX_LIMIT` (a larger ``limit`` is lowered to it). A ``limit`` or
``offset`` that is not a whole number (``limit`` at least 1, ``offset`` at
least 0), or given twice, is a 400 naming it.

A list with a :class:`Keyset` also takes ``after=<cursor>``: the page of the
items that follow the item the cursor names, in the list's order (a
model list's cursor is a model's name), found through the order's index
instead of counting ``offset`` rows: a deep page costs what the first one
does. Its answer has the same shape (``count``: the whole list's total), its
``next`` and ``previous`` links are keyset links too; ``after`` with
``offset`` is a 400.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Q
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.utils.urls import remove_query_param, replace_query_param

DEFAULT_LIMIT = 50
MAX_LIMIT = 100

_NOTHING = Q(pk__in=[])


def _whole_number(request, name: str, minimum: int) -> int | None:
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise ParseError(f"'{name}' is given {len(values)} times: give it once")
    try:
        number = int(values[0], 10)
    except ValueError:
        raise ParseError(f"'{name}' must be a whole number, not '{values[0][:40]}'") from None
    if number < minimum:
        raise ParseError(f"'{name}' must be at least {minimum}, not {number}")
    return number


@dataclass(frozen=True)
class Key:
    """One sort key of a keyset order: a field (``team__name``), descending
    or not, and whether it may be null (nulls sort first ascending, last
    descending, on every database)."""

    field: str
    descending: bool = False
    nullable: bool = False

    def order(self):
        expression = F(self.field)
        if self.descending:
            return expression.desc(nulls_last=True) if self.nullable else expression.desc()
        return expression.asc(nulls_first=True) if self.nullable else expression.asc()

    def beyond(self, value, forward: bool = True) -> Q:
        """The rows strictly after ``value`` in this key's order (before it with ``forward`` false)."""
        descending = self.descending != (not forward)
        if value is None:  # nulls come first ascending: every non-null follows
            return Q(**{f"{self.field}__isnull": False}) if not descending else _NOTHING
        found = Q(**{f"{self.field}__{'lt' if descending else 'gt'}": value})
        if self.nullable and descending:  # nulls come last
            found |= Q(**{f"{self.field}__isnull": True})
        return found

    def equal(self, value) -> Q:
        return Q(**{f"{self.field}__isnull": True}) if value is None else Q(**{self.field: value})


@dataclass(frozen=True)
class Keyset:
    """A list's order that pages by keyset: ``keys`` (the last one unique
    and not null) and ``cursor``, the field whose value names an item (a
    unique one: the cursor of ``after=``)."""

    keys: tuple[Key, ...]
    cursor: str

    def ordering(self) -> list:
        return [key.order() for key in self.keys]

    def past(self, values: tuple, forward: bool = True) -> Q:
        """The rows after (``forward``) or before the row whose keys hold ``values``."""
        found, same = _NOTHING, Q()
        for key, value in zip(self.keys, values, strict=True):
            found |= same & key.beyond(value, forward)
            same &= key.equal(value)
        return found

    def position(self, queryset, cursor: str) -> tuple:
        """The key values of the item named ``cursor`` (in the unfiltered
        table: an item filtered out still marks a place). Raises NotFound
        (404) when there is none."""
        fields = [key.field for key in self.keys]
        found = queryset.model.objects.filter(**{self.cursor: cursor}).values_list(*fields).first()
        if found is None:
            raise NotFound(f"'after' names no item of this list: '{cursor[:80]}'")
        return found


class ListPage(LimitOffsetPagination):
    """A page of a list with its total (``count``) and links to its neighbours."""

    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT
    after_query_param = "after"

    def get_limit(self, request) -> int:
        limit = _whole_number(request, self.limit_query_param, 1)
        return self.default_limit if limit is None else min(limit, self.max_limit)

    def get_offset(self, request) -> int:
        return _whole_number(request, self.offset_query_param, 0) or 0

    def paginate_queryset(self, queryset, request, view=None, keyset: Keyset | None = None):
        """A page by ``offset`` (DRF's), or by ``after`` when the list has a
        ``keyset``: the ``limit`` items after the one ``after`` names,
        ``offset`` more of them skipped first (0 by default). An empty
        ``after`` is no ``after`` (the first page; a form's empty field).
        Raises ParseError (400) for an ``after`` on a list without a keyset
        or given twice, NotFound (404) for one naming no item."""
        self.keyset = None
        values = [value for value in request.query_params.getlist(self.after_query_param) if value]
        if not values:
            return super().paginate_queryset(queryset, request, view)
        if keyset is None:
            raise ParseError("this list has no 'after': page it with 'offset'")
        if len(values) > 1:
            raise ParseError(f"'after' is given {len(values)} times: give it once")
        self.keyset, self.request = keyset, request
        self.limit = self.get_limit(request)
        self.offset = self.get_offset(request)
        self.count = self.get_count(queryset)
        ordered = queryset.order_by(*keyset.ordering())
        here = keyset.position(queryset, values[0])
        rows = list(ordered.filter(keyset.past(here))[self.offset : self.offset + self.limit + 1])
        self._more, rows = len(rows) > self.limit, rows[: self.limit]
        self._last = getattr(rows[-1], keyset.cursor) if rows else None
        # What comes before this page (the cursor's item and those before it), nearest first: the previous link.
        before = ordered.exclude(keyset.past(here)).reverse().values_list(keyset.cursor, flat=True)
        self._before = list(before[: self.limit + 1])
        return rows

    def get_next_link(self):
        if self.keyset is None:
            return super().get_next_link()
        if not self._more:
            return None
        url = remove_query_param(self._url(), self.offset_query_param)
        return replace_query_param(url, self.after_query_param, self._last)

    def get_previous_link(self):
        if self.keyset is None:
            return super().get_previous_link()
        url = self._url()
        if self.offset:  # one page back from the same cursor (from it when fewer than a page precede)
            return replace_query_param(url, self.offset_query_param, max(0, self.offset - self.limit))
        if not self._before:
            return None
        if len(self._before) <= self.limit:  # the first page
            return remove_query_param(url, self.after_query_param)
        return replace_query_param(url, self.after_query_param, self._before[self.limit])

    def _url(self) -> str:
        """This page's URL with its ``limit`` (as capped), as DRF's links carry it."""
        return replace_query_param(self.request.build_absolute_uri(), self.limit_query_param, self.limit)
