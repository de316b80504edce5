"""A moto S3 server on loopback with one empty bucket, for tests that need an
S3-compatible warehouse."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def moto_bucket(bucket: str) -> Iterator[dict[str, str]]:
    """Start the server, create ``bucket``, yield calving's FileIO S3 properties."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per S3 request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        props = {
            "s3.endpoint": f"http://{host}:{port}",
            "s3.access-key-id": "calving-test",
            "s3.secret-access-key": "calving-test-secret",
            "s3.region": "us-east-1",
        }
        boto3.client(
            "s3",
            endpoint_url=props["s3.endpoint"],
            aws_access_key_id=props["s3.access-key-id"],
            aws_secret_access_key=props["s3.secret-access-key"],
            region_name=props["s3.region"],
        ).create_bucket(Bucket=bucket)
        yield props
    finally:
        server.stop()
