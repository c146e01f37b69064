"""Teams and roles from the identity provider's groups (OIDC_GROUP_MAP).

The map is ``group=team:role`` entries separated by commas, or a JSON
object ``{"group": "team:role" | ["team:role", ...]}`` (for group names
with commas or ``=``, such as LDAP DNs); the target ``operator`` makes the
platform's operators. A person in several mapped groups of one team gets
the highest of their roles there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from models_store.accounts.models import Role
from models_store.accounts.permissions import role_level
from models_store.identifiers import team_name_validator

OPERATOR = "operator"


@dataclass(frozen=True)
class Grants:
    """What a person's groups give: team name -> role, and whether they are an operator."""

    roles: dict[str, str]
    operator: bool


def parse_map(text: str) -> dict[str, list[str]]:
    """OIDC_GROUP_MAP -> {group: ["team:role" or "operator", ...]}; ValueError naming a bad entry."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        raw = json.loads(text)
        pairs = [(g, t) for g, targets in raw.items() for t in (targets if isinstance(targets, list) else [targets])]
    else:
        pairs = []
        for entry in filter(None, (e.strip() for e in text.split(","))):
            group, sep, target = entry.rpartition("=")
            if not sep or not group:
                raise ValueError(f"OIDC_GROUP_MAP entry {entry!r} is not group=team:role")
            pairs.append((group.strip(), target.strip()))
    mapping: dict[str, list[str]] = {}
    for group, target in pairs:
        if target != OPERATOR:
            team, _, role = str(target).partition(":")
            if role not in Role.values or not team_name_validator.regex.match(team):
                raise ValueError(
                    f"OIDC_GROUP_MAP maps {group!r} to {target!r}: "
                    "use team:role (viewer, maintainer, owner) or operator"
                )
        mapping.setdefault(str(group), []).append(str(target))
    return mapping


def grants(groups, mapping: dict[str, list[str]]) -> Grants:
    """What ``groups`` (the claim's list; a single string is one group) give under ``mapping``."""
    if isinstance(groups, str):
        groups = [groups]
    roles: dict[str, str] = {}
    operator = False
    for group in groups or ():
        for target in mapping.get(str(group), ()):
            if target == OPERATOR:
                operator = True
                continue
            team, _, role = target.partition(":")
            if role_level(role) > role_level(roles.get(team)):
                roles[team] = role
    return Grants(roles, operator)
