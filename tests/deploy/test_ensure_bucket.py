"""MLflow's init step (deploy/docker/ensure_bucket.py): bucket names from s3:// URLs and clear failures."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from tests.deploy.support import DOCKER


def _module():
    spec = importlib.util.spec_from_file_location("ensure_bucket", DOCKER / "ensure_bucket.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ensure_bucket = _module()

# (url, bucket or None for a refused URL)
URLS = [
    ("s3://harnessrl-mlflow/artifacts", "harnessrl-mlflow"),
    ("s3://bucket", "bucket"),
    ("s3://bucket/a/b/c", "bucket"),
    ("s3:///artifacts", None),
    ("file:///tmp/artifacts", None),
    ("harnessrl-mlflow/artifacts", None),
]


@pytest.mark.parametrize(("url", "bucket"), URLS)
def test_bucket_of(url: str, bucket: str | None) -> None:
    if bucket is None:
        with pytest.raises(ValueError, match="not an s3://BUCKET/PREFIX URL"):
            ensure_bucket.bucket_of(url)
    else:
        assert ensure_bucket.bucket_of(url) == bucket


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_store_fails_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "user")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "password")
    client = ensure_bucket.s3_client(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(SystemExit, match="object store unreachable.*s3-endpoint-url"):
        ensure_bucket.ensure_bucket(client, "bucket", wait_s=0.0)


def test_missing_credentials_fail_with_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = ensure_bucket.s3_client(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(SystemExit, match="AWS_ACCESS_KEY_ID"):
        ensure_bucket.ensure_bucket(client, "bucket", wait_s=0.0)


def test_main_needs_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_S3_ENDPOINT_URL", raising=False)
    with pytest.raises(SystemExit, match="MLFLOW_S3_ENDPOINT_URL"):
        ensure_bucket.main(["s3://bucket/prefix"])


def test_creates_once_against_a_real_s3_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """With moto's S3 server (if installed): created the first time, found the second."""
    server_module = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "user")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "password")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=_closed_port(), verbose=False)
    server.start()
    try:
        client = ensure_bucket.s3_client(f"http://127.0.0.1:{server._port}")
        assert ensure_bucket.ensure_bucket(client, "harnessrl-mlflow", wait_s=5.0) is True
        assert ensure_bucket.ensure_bucket(client, "harnessrl-mlflow", wait_s=5.0) is False
    finally:
        server.stop()
