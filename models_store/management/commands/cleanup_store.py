"""``manage.py cleanup_store``: remove what a crash can leave in the model store.

On this machine: staging entries under ``MODEL_STORE_DIR/.tmp`` (uploads and
imports that never finished), local artifact directories no version row
references (an upload whose row never committed, or the local copy of a
deleted version), and, when ``WORKER_CACHE_DIR`` exists here (a worker's
machine), cached artifacts no version uses. In the storage backend (S3, when
``MODEL_STORAGE=s3``): artifact prefixes no version row references. Each
older than ``--min-age`` seconds so that uploads in progress are left alone.
Says what it removed; ``--dry-run`` only lists. Versions whose artifact the
storage backend lacks are reported. Run it on any machine: it needs only the
database and the storage backend (no shared disk). The same sweep runs on
a timer of every server and validating worker (ORPHAN_MIN_AGE_SECONDS,
:mod:`models_store.maintenance`); this command is for a one-off sweep.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from models_store import storage
from models_store.maintenance import sweep
from models_store.registry import selectors


class Command(BaseCommand):
    help = "Remove orphan files from the model store (interrupted uploads, artifacts without a version)."

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="list what would be removed")
        parser.add_argument(
            "--min-age", type=float, default=3600.0, help="only entries older than this many seconds (default 3600)"
        )

    def handle(self, *args, dry_run: bool, min_age: float, **options):
        verb = "would remove" if dry_run else "removed"
        removed = 0
        for line in sweep(min_age, settings.WORKER_CACHE_DIR, dry_run):
            self.stdout.write(f"{verb} {line}")
            removed += 1
        referenced = {artifact for artifact, _sha256 in selectors.artifacts_in_use()}  # not ensembles (no file)
        missing = storage.missing_artifacts(referenced)
        for relpath in missing:
            self.stdout.write(self.style.WARNING(f"missing artifact of a version: {relpath}"))
        self.stdout.write(f"{removed} orphan(s) {verb}, {len(missing)} missing artifact(s)")
