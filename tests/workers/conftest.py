"""Fixtures of the worker-mode tests."""

from __future__ import annotations

import pytest

from tests.support import s3


@pytest.fixture(scope="module")
def s3_server():
    """(endpoint, boto3 client) of a moto S3 server for the module."""
    with s3.s3_server() as server:
        yield server
