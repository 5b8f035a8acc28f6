"""Create the bucket of an s3:// URL if it is missing, waiting for the object store to come up.

MLflow's init container runs it (`python -m ensure_bucket s3://BUCKET/PREFIX`) before `mlflow server`, whose
`--artifacts-destination` needs the bucket to exist. The endpoint comes from MLFLOW_S3_ENDPOINT_URL and the
credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, as for MLflow itself.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any
from urllib.parse import urlparse


def bucket_of(url: str) -> str:
    """The bucket name of an `s3://BUCKET[/PREFIX]` URL."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"{url!r} is not an s3://BUCKET/PREFIX URL; set mlflow-artifacts-destination in "
                         "the harnessrl-config ConfigMap to one")
    return parsed.netloc


def ensure_bucket(client: Any, bucket: str, wait_s: float, poll_s: float = 2.0) -> bool:
    """Create `bucket` through the boto3 S3 `client` unless it exists; True when it was created.

    Connection failures are retried for `wait_s` seconds (the object store may still be starting)."""
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    deadline_s = time.monotonic() + wait_s
    while True:
        try:
            existing = {entry["Name"] for entry in client.list_buckets().get("Buckets", [])}
            if bucket in existing:
                return False
            client.create_bucket(Bucket=bucket)
            return True
        except NoCredentialsError as error:
            raise SystemExit("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (from the "
                             "harnessrl-minio Secret)") from error
        except EndpointConnectionError as error:
            if time.monotonic() >= deadline_s:
                raise SystemExit(f"object store unreachable after {wait_s:.0f} s ({error}); check s3-endpoint-url "
                                 "in the harnessrl-config ConfigMap and that MinIO is running") from error
            time.sleep(poll_s)


def s3_client(endpoint_url: str) -> Any:
    """A boto3 S3 client for `endpoint_url` that fails fast on a refused connection (the caller retries)."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name="us-east-1", config=Config(
        connect_timeout=5, read_timeout=30, retries={"max_attempts": 1}, s3={"addressing_style": "path"}))


def main(argv: list[str]) -> int:
    """`ensure_bucket s3://BUCKET/PREFIX [WAIT_S]`."""
    if len(argv) not in (1, 2):
        raise SystemExit("usage: python -m ensure_bucket s3://BUCKET/PREFIX [WAIT_S]")
    endpoint_url = os.environ.get("MLFLOW_S3_ENDPOINT_URL")
    if not endpoint_url:
        raise SystemExit("MLFLOW_S3_ENDPOINT_URL is not set; set it to the object store's URL (http://HOST:9000)")
    bucket = bucket_of(argv[0])
    wait_s = float(argv[1]) if len(argv) == 2 else 300.0
    created = ensure_bucket(s3_client(endpoint_url), bucket, wait_s)
    print(f"bucket {bucket} {'created' if created else 'already exists'} at {endpoint_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
