"""A real S3-compatible server on 127.0.0.1 for the object-store tests: moto in server mode,
started as its own process group and stopped (and checked gone) by the test."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from processes import free_port, start_in_group, stop_group, tail

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "corpus-test", "AWS_SECRET_ACCESS_KEY": "corpus-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class S3Server:
    endpoint: str
    log: Path

    def env(self) -> dict:
        """What a process needs to reach this server through s3fs / botocore."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "CORPUS_STORAGE_OPTIONS": ""}

    def client(self):
        """An independent boto3 client: checks what is really in the bucket, not what our code says."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")

    def new_bucket(self) -> str:
        name = f"corpus-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        out, token = [], None
        c = self.client()
        while True:
            kw = {"Bucket": bucket, "Prefix": prefix, **({"ContinuationToken": token} if token else {})}
            page = c.list_objects_v2(**kw)
            out += [o["Key"] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return sorted(out)
            token = page["NextContinuationToken"]


def _moto_server() -> list[str]:
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    if exe is None:
        pytest.fail("moto_server is not installed (pip install 'moto[server]'; the dev extra has it)")
    return [exe]


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = start_in_group(_moto_server() + ["-H", "127.0.0.1", "-p", str(port)], cwd=log.parent, env=env, log_path=log)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_group(proc)
                pytest.fail(f"moto_server did not start on 127.0.0.1:{port}:\n{tail(log)}")
            time.sleep(0.1)
    try:
        yield S3Server(f"http://127.0.0.1:{port}", log)
    finally:
        stop_group(proc)


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The environment of a process that talks to the test server (credentials, endpoint)."""
    import s3fs

    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    # fsspec keeps one S3FileSystem per option set for the process, bound to the endpoint it
    # first reached: a later module's server (another port) would get the stopped one.
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_server
    s3fs.S3FileSystem.clear_instance_cache()
