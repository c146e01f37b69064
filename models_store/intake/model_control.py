"""Triton's model control modes over the registry (``serve
--model-control-mode``, ``--load-model``, ``--repository-poll-secs``; Triton's
docs/user_guide/model_management.md):

- ``none``: every model is loaded at start; the repository extension
  refuses load and unload (inference/extensions/repository.py);
- ``poll``: as ``none``, and the model repository is read again every
  ``--repository-poll-secs`` (:class:`RepositoryPoll`): a new model
  directory is imported and served, a new version directory imported (the
  version policy chooses what serves), a version directory removed (or its
  file) retires the version it was imported as, a model directory removed
  unloads the model, one that comes back loads it again, a changed
  config.pbtxt or label file is applied;
- ``explicit``: only the models named by ``--load-model`` (``*``: every
  model) and the models their ensembles run are loaded at start, every
  other one unloaded; the repository extension loads and unloads.

"Loaded" is the registry's flag of a model (the repository extension's
load and unload), so a mode applies to every process and machine serving
this registry. Changes are audited as the system's and made through the
registry's services (load, unload, retire, restore).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from inference.runtime.shared_weights import Sharing
from models_store.errors import Refused
from models_store.intake.repository import IMPORT_SOURCE, ImportResult, import_repository, import_source
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import versions as version_services

logger = logging.getLogger(__name__)
State = selectors.State

NONE, POLL, EXPLICIT = "none", "poll", "explicit"
MODES = (NONE, POLL, EXPLICIT)
#: ``--load-model`` of every model (Triton's; not a pattern).
ALL = "*"


def _set_loaded(name: str, loaded: bool) -> bool:
    """Load or unload ``name`` as the system; False (logged) when refused
    (e.g. a ready ensemble of a loaded model still runs it)."""
    model = selectors.model_get(name)
    if model is None:
        return False
    try:
        model_services.model_set_loaded(model=model, loaded=loaded, actor=None)
    except Refused as exc:
        logger.warning("model control: could not %s '%s': %s", "load" if loaded else "unload", name, exc)
        return False
    return True


def _with_steps(names: Iterable[str]) -> set[str]:
    """``names`` and, for each ensemble among them, the models it runs (nested ensembles too)."""
    wanted, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        model = selectors.model_get(name)
        if model is not None:
            todo.extend(selectors.ensemble_composing_models(model))
    return wanted


def load_at_start(*, mode: str, names: Sequence[str] = (), exclude: Iterable[str] = ()) -> list[str]:
    """Make the registry's loaded models those ``mode`` starts with (module
    doc): ``none``, ``poll``: every model but ``exclude`` (models whose
    directory left the polled repository); ``explicit``: ``names`` (``*``:
    every model; unknown names are skipped: :func:`unknown_models`) with the
    models their ensembles run, every other one unloaded (ensembles first,
    so that none keeps a step loaded). Returns the loaded models' names, sorted."""
    states = selectors.model_load_states()
    if mode != EXPLICIT or ALL in names:
        keep = set(states) - set(exclude)
    else:
        keep = _with_steps(n for n in names if n in states)
    for name in sorted(keep):
        if not states[name][0]:
            _set_loaded(name, True)
    # ensembles first: unloading a model that a loaded ready ensemble runs is refused
    for name in sorted(set(states) - keep, key=lambda n: (not states[n][1], n)):
        if states[name][0]:
            _set_loaded(name, False)
    return sorted(name for name, (loaded, _) in selectors.model_load_states().items() if loaded)


def unknown_models(names: Iterable[str]) -> list[str]:
    """The names among ``names`` (``*`` aside) that no model of the registry has, sorted."""
    return sorted(set(names) - {ALL} - set(selectors.model_load_states()))


def _fingerprint(model_dir: Path) -> tuple:
    """What changes when a file under ``model_dir`` is added, removed,
    renamed or written: every entry's relative path, size and mtime."""
    entries = []
    for folder, dirs, files in os.walk(model_dir):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder, name)
            try:
                stat = path.stat()
            except OSError:  # removed meanwhile: the next poll sees it
                continue
            entries.append((str(path.relative_to(model_dir)), stat.st_size, stat.st_mtime_ns))
    return tuple(entries)


class RepositoryPoll:
    """The ``poll`` mode's reconciliation of a model repository ``root``
    with the registry (module doc): :meth:`run` once per poll. Only the
    model directories whose files changed since the last run are imported
    again (all of them on the first run). It remembers the versions it
    retired and the models it unloaded, so that only those come back when
    their files do (a version a person retired stays retired)."""

    def __init__(self, root: Path, strict: bool = False, sharing: Sharing | None = None):
        """``sharing``: this machine's copies of big models' weights, written when they are imported."""
        self.root = Path(root).resolve()
        self.strict = strict
        self.sharing = sharing
        self._seen: dict[str, tuple] = {}
        self._retired: set[int] = set()
        self._unloaded: set[str] = set()

    def removed(self) -> set[str]:
        """The models imported from a repository (a version's source names its
        directory relative to the repository, never this server's path) whose
        directory is gone from this one."""
        return {name for name in selectors.models_sourced_with(IMPORT_SOURCE) if not (self.root / name).is_dir()}

    def run(self) -> list[ImportResult]:
        """One poll: import the changed model directories, retire and
        restore versions, unload and load models (module doc). Returns the
        import's results (those of the changed directories). Raises
        FileNotFoundError when the repository is not a directory, and what
        the database raises (the timer retries at the next poll)."""
        if not self.root.is_dir():
            raise FileNotFoundError(f"model repository {self.root} is not a directory")
        current = {p.name: _fingerprint(p) for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")}
        changed = {name for name, print_ in current.items() if self._seen.get(name) != print_}
        results = (
            import_repository(self.root, strict=self.strict, only=changed, sharing=self.sharing) if changed else []
        )
        for result in results:
            if result.outcome != "unchanged":
                logger.info("model control: %s", result)
        for name in sorted(changed):
            self._reconcile_versions(name, [r for r in results if r.model == name])
        states = selectors.model_load_states()
        gone = [name for name in self.removed() if states.get(name, (False, False))[0]]
        for name in sorted(gone, key=lambda n: (not states[n][1], n)):  # ensembles first
            if _set_loaded(name, False):
                self._unloaded.add(name)
                logger.info("model control: '%s' left the repository; unloaded", name)
        for name in sorted(self._unloaded & set(current)):
            if _set_loaded(name, True):
                self._unloaded.discard(name)
                logger.info("model control: '%s' is back in the repository; loaded", name)
        self._seen = current
        return results

    def _reconcile_versions(self, name: str, results: list[ImportResult]) -> None:
        """After importing model ``name``: its versions imported from its
        directory that no version directory holds any more are retired (a
        directory whose new file failed keeps the version it had, as
        Triton keeps a model whose reload failed); those this poll retired
        that are back are restored."""
        model = selectors.model_get(name)
        if model is None:
            return
        model_dir = self.root / name
        present = {r.version for r in results if r.outcome in ("created", "unchanged")}
        failed = {import_source(model_dir / r.directory) for r in results if r.outcome == "failed" and r.directory}
        for version in selectors.versions_sourced_with(model, f"{IMPORT_SOURCE}{name}/"):
            if version.number in present:
                if version.pk in self._retired and version.state == State.UNAVAILABLE:
                    self._change(version, restore=True)
            elif version.state == State.READY and version.source not in failed:
                self._change(version, restore=False)

    def _change(self, version, restore: bool) -> None:
        try:
            if restore:
                version_services.version_restore(version=version, actor=None)
                self._retired.discard(version.pk)
            else:
                version_services.version_retire(version=version, actor=None, force=True)
                self._retired.add(version.pk)
        except Refused as exc:  # a label points at it, a ready ensemble runs it
            doing = "restore" if restore else "retire"
            logger.warning("model control: could not %s version %s: %s", doing, version, exc)
            return
        what = "back in the repository; restored" if restore else "left the repository; retired"
        logger.info("model control: '%s' version %d %s", version.model.name, version.number, what)
