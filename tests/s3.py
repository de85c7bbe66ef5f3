"""A throwaway S3-API server for the tests: moto's standalone server, in its own process on 127.0.0.1.

It stands in for S3, GCS (through its S3 API) or MinIO; README.md, "An object-store warehouse",
says what it does not reproduce.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import uuid

from tests.ports import free_port

# moto accepts any key; these are made up, long enough to be found if they leaked anywhere.
ACCESS_KEY = "AKIAFACTORYTESTKEY0001"
SECRET_KEY = "factory-test-secret-" + "x" * 20
REGION = "us-east-1"


class MotoServer:
    """``python -m moto.server`` on a free port; ``bucket()`` makes a bucket in it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise OSError(f"moto server exited with {self.process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.1)
        self.stop()
        raise OSError(f"moto server did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def bucket(self) -> str:
        name = f"factory-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key in ``bucket`` under ``prefix``."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    def file_io_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties that reach this server."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET_KEY,
            "s3.region": REGION,
            "s3.path-style-access": "true",
        }
