"""Version policy: which versions of a model serve (Triton ``version_policy``).

Pure functions over version numbers. Policies apply to READY versions, so a
failed upload never takes the serving version offline.
"""

from __future__ import annotations

from collections.abc import Iterable


def served_versions(policy: str, ready: Iterable[int], latest: int = 1, specific: Iterable[int] = ()) -> list[int]:
    """The READY version numbers that ``policy`` serves, highest first.

    ``policy`` is ``latest`` (the ``latest`` highest), ``all``, or
    ``specific`` (those listed in ``specific``). Raises ValueError for an
    unknown policy or a ``latest`` count below 1.
    """
    numbers = sorted(set(ready), reverse=True)
    if policy == "latest":
        if latest < 1:
            raise ValueError("a latest policy serves at least 1 version")
        return numbers[:latest]
    if policy == "all":
        return numbers
    if policy == "specific":
        wanted = set(specific)
        return [n for n in numbers if n in wanted]
    raise ValueError(f"unknown version policy {policy!r}")


def default_version(policy: str, ready: Iterable[int], latest: int = 1, specific: Iterable[int] = ()) -> int | None:
    """The version served when a request names none: the highest served one."""
    served = served_versions(policy, ready, latest, specific)
    return served[0] if served else None


def traffic_routes(traffic: dict, labels: dict, ready: Iterable[int]) -> list[tuple[str, int, int]]:
    """The traffic split of a model as ``(label, version, weight)``, for the
    entries that can take traffic: weight above 0 and a label that points at
    a READY version (an entry whose label was deleted, or whose version
    stopped being READY, is skipped: its share goes to the others).

    ``traffic``: version label -> weight (integers, summing to 100 when set);
    ``labels``: version label -> version number.
    """
    ready_set = set(ready)
    routes = []
    for label, weight in sorted(traffic.items()):
        number = labels.get(label)
        if weight > 0 and number in ready_set:
            routes.append((label, number, int(weight)))
    return routes


def served_with_traffic(served: list[int], routes: list[tuple[str, int, int]]) -> list[int]:
    """The versions that serve: the policy's (``served``) and those a traffic
    split sends requests to, highest first (a split keeps its versions
    serving whatever the policy says, as a canary rollout keeps both)."""
    return sorted(set(served) | {number for _label, number, _weight in routes}, reverse=True)
