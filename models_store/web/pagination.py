"""Pages of the management API's lists: DRF's limit/offset pagination.

``GET /api/models/?limit=50&offset=100`` answers ``{"count": <total>,
"next": <url or null>, "previous": <url or null>, "results": [...]}``;
without ``limit`` a page holds :data:`DEFAULT_LIMIT` items, and at most
:data:`MAX_LIMIT` (a larger ``limit`` is lowered to it). A ``limit`` or
``offset`` that is not a whole number (``limit`` at least 1, ``offset`` at
least 0), or given twice, is a 400 naming it.
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


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


class ListPage(LimitOffsetPagination):
    """A page of a list with its total (``count``) and links to its neighbours."""

    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT

    def get_limit(self, request) -> int:
        limit = _whole_number(request, self.limit_query_param, 1)
        return self.default_limit if limit is None else min(limit, self.max_limit)

    def get_offset(self, request) -> int:
        return _whole_number(request, self.offset_query_param, 0) or 0
