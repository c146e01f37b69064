"""The options of ``manage.py serve`` that are Triton's (``tritonserver
--help``), spelled and read as Triton reads them, and checked together:
:func:`add_arguments` declares them, :func:`model_control` and
:func:`log_settings` read them. What each one does here:
docs/command-line.md.

Triton's boolean options take ``=true``/``=false`` (also ``on``/``off``,
``1``/``0``, any case); here a bare ``--exit-on-error`` means true too.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from django.core.management.base import CommandError

from models_store.intake.model_control import ALL, EXPLICIT, MODES, POLL

_TRUE, _FALSE = ("true", "on", "1"), ("false", "off", "0")
#: Triton's default --repository-poll-secs.
POLL_SECONDS = 15
LOG_FORMATS = ("default", "ISO8601")


def boolean(text: str) -> bool:
    """A Triton boolean option's value. Raises ArgumentTypeError."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r} (true/false, on/off, 1/0)")


def _mode(text: str) -> str:
    value = text.strip().lower()
    if value not in MODES:
        raise argparse.ArgumentTypeError(f"invalid model control mode {text!r} (none, poll or explicit)")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return value


def _log_format(text: str) -> str:
    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"invalid log format {text!r} (default or ISO8601)")
    return text


def add_arguments(parser) -> None:
    """Declare Triton's options on ``serve``'s parser (each help names Triton's flag it is)."""
    group = parser.add_argument_group("Triton's options (docs/command-line.md)")
    flag = {"nargs": "?", "const": True, "type": boolean, "metavar": "BOOL"}
    group.add_argument(
        "--model-control-mode", type=_mode, default=None, metavar="none|poll|explicit",
        help="Triton's model control mode; not given: as before (load/unload allowed, models keep their state)",
    )  # fmt: skip
    group.add_argument(
        "--load-model", action="append", default=[], metavar="NAME",
        help="with --model-control-mode explicit: a model to load at start (repeatable; '*': every model)",
    )  # fmt: skip
    group.add_argument(
        "--repository-poll-secs", type=_non_negative, default=POLL_SECONDS, metavar="SECONDS",
        help=f"with --model-control-mode poll: seconds between reads of the repository (default {POLL_SECONDS})",
    )  # fmt: skip
    group.add_argument(
        "--strict-model-config", default=False, **flag,
        help="a model needs a config.pbtxt declaring its inputs and outputs (default false)",
    )  # fmt: skip
    group.add_argument(
        "--disable-auto-complete-config", action="store_true", help="the same as --strict-model-config=true"
    )
    group.add_argument(
        "--exit-on-error", default=False, **flag,
        help="exit (status 1) when a model fails to import or a --load-model is unknown (default false)",
    )  # fmt: skip
    group.add_argument("--log-verbose", type=_non_negative, default=None, metavar="LEVEL", help="> 0: debug logs")
    group.add_argument("--log-info", default=None, **flag, help="info logs on or off")
    group.add_argument("--log-warning", default=None, **flag, help="warning logs on or off")
    group.add_argument("--log-error", default=None, **flag, help="error logs on or off")
    group.add_argument("--log-format", type=_log_format, default=None, help="default or ISO8601")
    group.add_argument("--http-address", default=None, help="address the HTTP server binds (default: --host)")
    group.add_argument("--grpc-address", default=None, help="address the gRPC server binds (default: --host)")


@dataclass(frozen=True)
class ModelControl:
    """The model control options, checked: ``mode`` ("": not given),
    ``load`` (--load-model), ``poll_seconds``, ``strict``, ``exit_on_error``."""

    mode: str
    load: tuple[str, ...]
    poll_seconds: int
    strict: bool
    exit_on_error: bool
    warnings: tuple[str, ...] = ()


def model_control(options: dict, default_mode: str = "") -> ModelControl:
    """The model control options of ``serve``'s parsed ``options``
    (``default_mode``: the mode when the flag is not given, the
    MODEL_CONTROL_MODE setting). Raises CommandError for a combination Triton
    refuses ('*' beside other names) or that cannot work here (poll without
    a repository or with 0 seconds), and for a ``default_mode`` that is not
    a mode; options Triton ignores in a mode are kept as ``warnings``."""
    mode = options["model_control_mode"]
    if mode is None and default_mode:
        try:
            mode = _mode(default_mode)
        except argparse.ArgumentTypeError as exc:
            raise CommandError(f"MODEL_CONTROL_MODE: {exc}") from None
    mode = mode or ""
    load = tuple(options["load_model"])
    warnings = []
    if ALL in load and len(load) > 1:
        raise CommandError("--load-model '*' must be the only --load-model (it loads every model)")
    if any(not name.strip() for name in load):
        raise CommandError("--load-model needs a model name")
    if load and mode != EXPLICIT:
        warnings.append("--load-model is ignored: it applies only with --model-control-mode explicit (as Triton)")
    if mode == POLL:
        if options["model_repository"] is None:
            raise CommandError("--model-control-mode poll needs --model-repository (the repository it polls)")
        if options["repository_poll_secs"] <= 0:
            raise CommandError("--model-control-mode poll needs --repository-poll-secs of 1 or more")
    return ModelControl(
        mode=mode,
        load=load,
        poll_seconds=options["repository_poll_secs"],
        strict=bool(options["strict_model_config"] or options["disable_auto_complete_config"]),
        exit_on_error=bool(options["exit_on_error"]),
        warnings=tuple(warnings),
    )


def log_settings(options: dict) -> dict:
    """Triton's log settings the options give (the logging extension's
    names: log_verbose_level, log_info, ...); {} when none is given."""
    given = {
        "log_verbose_level": options["log_verbose"],
        "log_info": options["log_info"],
        "log_warning": options["log_warning"],
        "log_error": options["log_error"],
        "log_format": options["log_format"],
    }
    return {key: value for key, value in given.items() if value is not None}
