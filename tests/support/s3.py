"""A real S3 API server for tests: moto's standalone server (MinIO stands in
production), on a free port, with the artifact bucket created."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3

from tests.support.server import free_port

BUCKET = "models"


@contextmanager
def s3_server() -> Iterator[tuple[str, object]]:
    """(endpoint URL, boto3 S3 client) of a moto server holding an empty
    ``BUCKET``; stopped on exit."""
    port = free_port()
    binary = Path(sys.executable).parent / "moto_server"
    process = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(endpoint, timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
        )
        client.create_bucket(Bucket=BUCKET)
        yield endpoint, client
    finally:
        process.terminate()
        process.wait()


def s3_env(endpoint: str) -> dict:
    """The settings (environment) of a process storing artifacts there."""
    return {
        "MODEL_STORAGE": "s3",
        "MODEL_STORAGE_BUCKET": BUCKET,
        "MODEL_STORAGE_ENDPOINT": endpoint,
        "MODEL_STORAGE_ACCESS_KEY": "k",
        "MODEL_STORAGE_SECRET_KEY": "s",
    }


def keys(client) -> set[str]:
    """Every object key in the bucket."""
    return {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])}
