"""What names and numbers in the model store may be: model names, version
labels, team names, version numbers and row ids. The models, the forms, the
serializers and the OpenAPI schema's path parameters all take them from here.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

MODEL_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
model_name_validator = RegexValidator(
    MODEL_NAME_RE,
    "A model name starts with a letter or digit and holds only letters, digits, '_', '.' and '-' "
    "(at most 128 characters).",
)

team_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
    "A team name starts with a letter or digit and holds only letters, digits, '_', '.' and '-' "
    "(at most 64 characters).",
)

label_validator = RegexValidator(
    r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,63}$",
    "A version label holds letters, digits, '_' and '-' (at most 64 characters).",
)

#: The registry's version numbers are 32-bit (PositiveIntegerField).
MAX_VERSION_NUMBER = 2**31 - 1
#: Row ids (webhooks, deliveries) are 64-bit (BigAutoField).
MAX_ROW_ID = 2**63 - 1


def check_whole(validator: RegexValidator, value: str) -> None:
    """Run a name's RegexValidator on the whole value: its ``$`` also matches
    before a final newline, which a name may not end with. Raises Django's
    ValidationError with the validator's message."""
    validator(value)
    if value.endswith("\n"):
        raise ValidationError(validator.message)
