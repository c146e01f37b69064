"""``manage.py cleanup_store``: remove what a crash can leave in the model store.

Removes staging entries under ``MODEL_STORE_DIR/.tmp`` (uploads and imports
that never finished) and artifact directories no version row references
(an upload whose row never committed), each older than ``--min-age``
seconds so that uploads in progress are left alone. Says what it removed;
``--dry-run`` only lists. Versions whose artifact is missing are reported.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from models_store import storage
from models_store.models import ModelVersion


class Command(BaseCommand):
    help = "Remove orphan files from the model store (interrupted uploads, artifacts without a version)."

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="list what would be removed")
        parser.add_argument(
            "--min-age", type=float, default=3600.0, help="only entries older than this many seconds (default 3600)"
        )

    def handle(self, *args, dry_run: bool, min_age: float, **options):
        referenced = set(ModelVersion.objects.values_list("artifact", flat=True))
        orphans = storage.find_orphans(referenced, min_age)
        root = storage.store_root()
        verb = "would remove" if dry_run else "removed"
        for path in orphans:
            if not dry_run:
                storage.remove_path(path)
            self.stdout.write(f"{verb} {path.relative_to(root)}")
        missing = [relpath for relpath in sorted(referenced) if not storage.artifact_path(relpath).is_file()]
        for relpath in missing:
            self.stdout.write(self.style.WARNING(f"missing artifact of a version: {relpath}"))
        self.stdout.write(f"{len(orphans)} orphan(s) {verb}, {len(missing)} missing artifact(s)")
