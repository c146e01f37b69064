"""The runtime trace and log settings of a machine. Spec: Triton's trace and logging extensions,
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_trace.md and extension_logging.md.

**Sampling** of traces (:mod:`inference.observability.tracing`) follows the trace settings (``GET/POST
/v2/trace/setting`` and ``/v2/models/<m>/trace/setting``):
``trace_level`` OFF or TIMESTAMPS (TENSORS is taken as TIMESTAMPS: tensor
contents never go into traces; see payload logging), ``trace_rate`` (one
request in N), ``trace_count`` (traces left, -1 unlimited; per process),
``log_frequency`` (accepted, echoed). A request whose client sampled it
(``traceparent`` flags 01) is traced whenever the level is not OFF. The log
settings (``GET/POST /v2/logging``: ``log_info``, ``log_warning``,
``log_error``, ``log_verbose_level``, ``log_format``) set the levels of the
process's loggers.

**Bounded**: every value is checked as Triton checks it, within range:
``trace_level`` 1 to 3 known levels, de-duplicated (OFF alone);
``trace_rate``, ``trace_count``, ``log_frequency`` 32-bit integers (text of
more than 10 digits is refused before it is parsed); a refused value is
quoted in at most a few dozen characters. The stored file is at most
MAX_SETTINGS_BYTES (64 KiB): a write beyond is refused, a larger file is
not read, and what is read is cleaned again.

**Shared by the processes of a machine**: settings live in
``$VAR_DIR/run/runtime-settings.json`` with a change beacon beside it
(``runtime-settings.changes``, as the registry's); every server process and
worker reads the beacon (one memory read) at each inference and reloads the
file when it moved, so a change applies everywhere before the next request.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import threading
from pathlib import Path

from inference.protocol.errors import InvalidInput
from inference.serving.changes import ChangeBeacon

logger = logging.getLogger(__name__)

TRACE_DEFAULTS = {
    "trace_level": ["TIMESTAMPS"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "opentelemetry",
}
LOG_DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}
LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
#: Triton parses trace_rate, trace_count and log_frequency with ``std::stoi``: 32-bit integers.
INT32_MAX = 2**31 - 1
#: A number sent as text: at most 10 digits, matched before ``int()`` parses anything.
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]{1,10}")
#: The stored settings' size (the JSON file every process reloads at a change): a write beyond is refused.
MAX_SETTINGS_BYTES = 64 * 1024
_QUOTED = 40  # characters of a refused value quoted in an error message


def _shown(value) -> str:
    """A refused value for an error message: never more than a few dozen characters."""
    if isinstance(value, (list, tuple, dict)) and len(value) > len(LEVELS):
        return f"a {type(value).__name__} of {len(value)} entries"
    if isinstance(value, str) and len(value) > _QUOTED:
        return f"{value[:_QUOTED]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= 2 * _QUOTED else f"{text[: 2 * _QUOTED]}..."


def _integer(key: str, value, minimum: int, maximum: int = INT32_MAX) -> str:
    """An integer setting (a JSON number, or decimal text as Triton's clients
    send it) as its canonical text. Raises InvalidInput outside [minimum,
    maximum], for a fraction, and for text of more than 10 digits (refused
    before it is parsed: a 4,001-digit number costs no parse)."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        number = int(value)
    if number is None or not minimum <= number <= maximum:
        raise InvalidInput(f"trace setting '{key}' must be an integer in [{minimum}, {maximum}], got {_shown(value)}")
    return str(number)


def _levels(value) -> list[str]:
    """A trace_level update (a level or a list of levels) as the levels in
    force, de-duplicated, in the order of LEVELS; as Triton, OFF may not be
    combined with another level. Raises InvalidInput."""
    levels = value if isinstance(value, list) else [value]
    if not 1 <= len(levels) <= len(LEVELS) or any(not isinstance(lv, str) or lv not in LEVELS for lv in levels):
        raise InvalidInput(
            f"trace_level must list 1 to {len(LEVELS)} levels among {', '.join(LEVELS)}, got {_shown(value)}"
        )
    unique = set(levels)
    if "OFF" in unique and len(unique) > 1:
        raise InvalidInput("trace_level 'OFF' cannot be combined with another level")
    return [level for level in LEVELS if level in unique]


def clean_trace_settings(update: dict, per_model: bool) -> dict:
    """Trace settings from a client's update (values as Triton's clients send
    them: strings, numbers, a list for trace_level; None: back to the
    global value, for a model), each bounded: trace_level 1 to 3 known levels
    (de-duplicated), trace_rate in [1, 2**31 - 1], trace_count in [-1, 2**31 - 1],
    log_frequency in [0, 2**31 - 1]. Raises InvalidInput."""
    if not isinstance(update, dict):
        raise InvalidInput("trace settings must be a JSON object")
    clean: dict = {}
    for key, value in update.items():
        if key not in TRACE_DEFAULTS:
            raise InvalidInput(f"unknown trace setting {_shown(key)} (settings: {', '.join(TRACE_DEFAULTS)})")
        if value is None:
            if not per_model:
                raise InvalidInput(f"trace setting '{key}' may be cleared (null) only for a model")
            clean[key] = None
        elif key == "trace_level":
            clean[key] = _levels(value)
        elif key == "trace_rate":
            clean[key] = _integer(key, value, 1)
        elif key == "trace_count":
            clean[key] = _integer(key, value, -1)
        elif key == "log_frequency":
            clean[key] = _integer(key, value, 0)
        elif key == "trace_file":
            if value != "":
                raise InvalidInput("trace_file is not supported: traces go to the OTLP endpoint")
            clean[key] = ""
        elif key == "trace_mode":
            if value != "opentelemetry":
                raise InvalidInput("trace_mode must be 'opentelemetry'")
            clean[key] = value
    return clean


def clean_log_settings(update: dict) -> dict:
    """Log settings from a client's update (Triton's keys: log_info,
    log_warning, log_error booleans; log_verbose_level an integer in [0,
    2**32 - 1]; log_format 'default' or 'ISO8601'; log_file empty). Raises
    InvalidInput."""
    if not isinstance(update, dict):
        raise InvalidInput("log settings must be a JSON object")
    clean: dict = {}
    for key, value in update.items():
        if key not in LOG_DEFAULTS:
            raise InvalidInput(f"unknown log setting {_shown(key)} (settings: {', '.join(LOG_DEFAULTS)})")
        if key in ("log_info", "log_warning", "log_error"):
            if not isinstance(value, bool):
                raise InvalidInput(f"log setting '{key}' must be a boolean")
        elif key == "log_verbose_level":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
                raise InvalidInput("log_verbose_level must be an integer in [0, 4294967295] (Triton's uint32)")
        elif key == "log_file":
            if value != "":
                raise InvalidInput("log_file is not supported: logs go to the process's standard error")
        elif key == "log_format" and value not in ("default", "ISO8601"):
            raise InvalidInput("log_format must be 'default' or 'ISO8601'")
        clean[key] = value
    return clean


def _checked_state(state) -> dict:
    """The stored settings cleaned again as they are read (a file of an
    earlier version, or edited by hand, may hold anything): a section that
    fails is dropped, and logged."""
    state = state if isinstance(state, dict) else {}
    models = state.get("models") if isinstance(state.get("models"), dict) else {}
    checked = {
        "trace": _checked("global trace", state.get("trace", {}), lambda v: clean_trace_settings(v, per_model=False)),
        "models": {},
        "log": _checked("log", state.get("log", {}), clean_log_settings),
    }
    for name, own in models.items():
        own = _checked(f"model {_shown(name)} trace", own, lambda v: clean_trace_settings(v, per_model=False))
        if own:
            checked["models"][name] = own
    return checked


def _checked(what: str, value, clean) -> dict:
    try:
        return clean(value)
    except InvalidInput as exc:
        logger.warning("ignoring the stored %s settings: %s", what, exc)
        return {}


class RuntimeSettings:
    """Trace and log settings shared by the processes of a machine (module doc)."""

    def __init__(self, directory: str | Path):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "runtime-settings.json"
        self.beacon = ChangeBeacon(directory / "runtime-settings.changes")
        self._seen = -1
        self._state = {"trace": {}, "models": {}, "log": {}}
        self._sampled = itertools.count()
        self._counts: dict[str, int] = {}  # model ("" global) -> traces taken in this process
        self._lock = threading.Lock()
        self.follow()

    # -- reading -----------------------------------------------------------
    def follow(self) -> None:
        """Reload when another process (or this one) changed the settings: a
        file over MAX_SETTINGS_BYTES, unreadable, or malformed keeps the
        current settings until the next change (logged once)."""
        value = self.beacon.read()
        if value == self._seen:
            return
        with self._lock:
            value = self.beacon.read()
            if value == self._seen:
                return
            self._seen = value
            try:
                state = self._read()
            except (OSError, ValueError) as exc:
                logger.error("reading %s failed (%s); keeping the current settings", self.path, exc)
                return
            self._state = _checked_state(state)
            self._counts.clear()
        apply_log_settings(self.log())

    def _read(self) -> dict:
        """The stored settings ({} when none); ValueError beyond MAX_SETTINGS_BYTES or malformed."""
        try:
            with open(self.path, "rb") as file:
                text = file.read(MAX_SETTINGS_BYTES + 1)
        except FileNotFoundError:
            return {}
        if len(text) > MAX_SETTINGS_BYTES:
            raise ValueError(f"the file is over {MAX_SETTINGS_BYTES} bytes")
        return json.loads(text)

    def trace(self, model: str | None = None) -> dict:
        """The trace settings in force (a model's: its own over the global ones)."""
        settings = {**TRACE_DEFAULTS, **self._state["trace"]}
        if model:
            settings.update(self._state["models"].get(model, {}))
        return settings

    def log(self) -> dict:
        return {**LOG_DEFAULTS, **self._state["log"]}

    # -- writing -----------------------------------------------------------
    def _write(self, change) -> None:
        import fcntl

        lock_path = self.path.with_suffix(".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                state = _checked_state(self._read())
            except ValueError:  # over the size limit or malformed: start again from the defaults
                state = _checked_state({})
            change(state)
            text = json.dumps(state, sort_keys=True)
            if len(text) > MAX_SETTINGS_BYTES:  # ASCII: characters are bytes
                raise InvalidInput(
                    f"the trace and log settings would take {len(text)} bytes, over the limit of "
                    f"{MAX_SETTINGS_BYTES}: clear some models' own trace settings (null values) first"
                )
            temporary = self.path.with_suffix(f".tmp{os.getpid()}")
            temporary.write_text(text)
            os.replace(temporary, self.path)
            self.beacon.bump()
        finally:
            os.close(fd)
        self.follow()

    def update_trace(self, update: dict, model: str | None = None) -> dict:
        """Apply a trace settings update (cleaned: clean_trace_settings); the
        settings in force after it. Raises InvalidInput, also when the stored
        settings would exceed MAX_SETTINGS_BYTES (nothing is changed then)."""
        clean = clean_trace_settings(update, per_model=bool(model))

        def change(state):
            if model:
                own = state["models"].setdefault(model, {})
                for key, value in clean.items():
                    if value is None:
                        own.pop(key, None)
                    else:
                        own[key] = value
                if not own:
                    state["models"].pop(model, None)
            else:
                state["trace"].update(clean)

        if clean:
            self._write(change)
        return self.trace(model)

    def update_log(self, update: dict) -> dict:
        """Apply a log settings update (cleaned: clean_log_settings); the
        settings in force after it. Raises InvalidInput."""
        clean = clean_log_settings(update)
        if clean:
            self._write(lambda state: state["log"].update(clean))
        return self.log()

    # -- sampling ------------------------------------------------------------
    def sample(self, model: str, client_sampled: bool) -> bool:
        """Whether to trace an inference of ``model`` (module doc)."""
        self.follow()
        settings = self.trace(model)
        if settings["trace_level"] == ["OFF"]:
            return False
        scope = model if model in self._state["models"] else ""
        count = int(settings["trace_count"])
        if count >= 0 and self._counts.get(scope, 0) >= count:
            return False
        if not client_sampled and next(self._sampled) % int(settings["trace_rate"]) != 0:
            return False
        if count >= 0:
            with self._lock:
                self._counts[scope] = self._counts.get(scope, 0) + 1
        return True


_initial: dict | None = None  # the configured levels and formatters, restored by the defaults


def apply_log_settings(settings: dict) -> None:
    """Set the process's log levels from Triton's log settings: verbose ->
    DEBUG (and the per-request log line on), info -> INFO, warning ->
    WARNING, error -> ERROR, none -> CRITICAL; the defaults restore the
    configured levels (LOG_LEVEL, REQUEST_LOG_LEVEL)."""
    global _initial
    names = ("", "django", "inference.request")
    if _initial is None:
        if settings == LOG_DEFAULTS:
            return
        _initial = {
            "levels": {name: logging.getLogger(name).level for name in names},
            "formatters": [(h, h.formatter) for h in logging.getLogger().handlers],
        }
    if settings == LOG_DEFAULTS:
        for name, level in _initial["levels"].items():
            logging.getLogger(name).setLevel(level)
        for handler, formatter in _initial["formatters"]:
            handler.setFormatter(formatter)
        return
    if settings["log_verbose_level"] > 0:
        level = logging.DEBUG
    elif settings["log_info"]:
        level = logging.INFO
    elif settings["log_warning"]:
        level = logging.WARNING
    elif settings["log_error"]:
        level = logging.ERROR
    else:
        level = logging.CRITICAL
    logging.getLogger().setLevel(level)
    logging.getLogger("django").setLevel(level)
    logging.getLogger("inference.request").setLevel(logging.DEBUG if level == logging.DEBUG else logging.NOTSET)
    if settings["log_format"] == "ISO8601":
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S%z")
        for handler in logging.getLogger().handlers:
            handler.setFormatter(formatter)


_settings: RuntimeSettings | None = None


def install_settings(directory: str | Path) -> RuntimeSettings:
    global _settings
    _settings = RuntimeSettings(directory)
    return _settings


def runtime_settings() -> RuntimeSettings:
    if _settings is None:
        raise RuntimeError("the runtime settings are not installed (the composition root did not run)")
    return _settings


def follow() -> None:
    """Follow settings changes of the machine (one memory read); call per inference."""
    if _settings is not None:
        _settings.follow()


def installed() -> RuntimeSettings | None:
    """The installed settings, or None (not installed: nothing is sampled out)."""
    return _settings
