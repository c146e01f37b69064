"""List latency at scale (issue 26, item 4): the management API's model list
and the web UI's models list with N models, each with two versions and a
version label, against the unpaginated list (every model serialized, what
``GET /api/models/`` answered before pages) measured in the same run.

Runs in process through Django's test client (the view's own time: routing,
authentication, queries, serialization, rendering; no socket), in a fresh
SQLite database under a temporary VAR_DIR, or PostgreSQL with
``--database-url``.

Usage: ``.venv/bin/python bench/lists.py [--models 1000] [--repeat 30]
[--database-url postgres://postgres@127.0.0.1:5432/bench_lists]``; prints a
Markdown table of medians (ms).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup(database_url: str | None) -> None:
    os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="bench-lists-"))
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    if database_url:
        call_command("flush", interactive=False, verbosity=0)
    call_command("migrate", verbosity=0)


def _seed(count: int) -> None:
    from models_store.models import ModelVersion, RegisteredModel, Team, VersionLabel

    teams = [Team.objects.create(name=f"team{i}") for i in range(10)]
    models = RegisteredModel.objects.bulk_create(
        RegisteredModel(name=f"model-{i:05d}", team=teams[i % 10], description=f"model number {i}")
        for i in range(count)
    )
    states = ModelVersion.State
    versions = ModelVersion.objects.bulk_create(
        ModelVersion(
            model=model, number=n, artifact=f"{model.name}/{n}/model.onnx", sha256=f"{model.pk:032x}{n:032x}",
            size=1000 * n, state=states.READY if n == 2 or model.pk % 7 else states.FAILED,
            inputs=[{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
            outputs=[{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
        )
        for model in models
        for n in (1, 2)
    )  # fmt: skip
    VersionLabel.objects.bulk_create(
        VersionLabel(model_id=v.model_id, name="stable", version=v) for v in versions if v.number == 2
    )


def _median_ms(call, repeat: int) -> float:
    call()  # warm: templates compiled, connections open
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = call()
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.content[:200]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    _setup(args.database_url)
    _seed(args.models)

    from django.test import Client

    from models_store.accounts import services as accounts
    from models_store.registry import selectors
    from models_store.registry.serializers import ModelSerializer

    user = accounts.user_create(username="bench", password="Bench-password-123", superuser=True)
    api = Client(
        HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=user, name='bench')[1]}"
    )
    ui = Client(HTTP_HOST="localhost")
    ui.force_login(user)

    class _Everything:  # what the list answered before it had pages
        status_code = 200
        content = b""

    def everything():
        ModelSerializer(selectors.model_listing(None, prefetched=False), many=True).data  # noqa: B018 - serialization is the cost
        return _Everything()

    cells = [
        ("GET /api/models/ (a page: 50)", lambda: api.get("/api/models/")),
        ("GET /api/models/?limit=100", lambda: api.get("/api/models/?limit=100")),
        ("GET /api/models/?limit=20&offset=500", lambda: api.get("/api/models/?limit=20&offset=500")),
        ("GET /api/models/?state=FAILED&order=-updated", lambda: api.get("/api/models/?state=FAILED&order=-updated")),
        ("web UI /models/ (a page: 50)", lambda: ui.get("/models/")),
        ("web UI /models/?name=model-00&team=team3&page=2", lambda: ui.get("/models/?name=model-00&team=team3&page=2")),
        (f"baseline: every model serialized ({args.models})", everything),
    ]
    print(f"{args.models} models, 2 versions and a label each; median of {args.repeat} (ms)\n")
    print("| list | median ms |\n|---|---:|")
    for name, call in cells:
        print(f"| {name} | {_median_ms(call, args.repeat):.1f} |")


if __name__ == "__main__":
    main()
