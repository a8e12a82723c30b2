"""An S3-compatible server for the cluster tests: moto's server mode (``moto[server]`` from PyPI),
one process on a loopback port, everything in memory.

Spark reaches it through Hadoop's S3A file system (``s3a://bucket/...``; hadoop-aws and the AWS SDK
v2 modules it calls come from ``jvm/s3a/pom.xml``) with the settings ``spark_conf()`` gives: the
endpoint, path-style addressing and moto's fixed test credentials. The tests create buckets, list
keys and read objects with boto3 (a dependency of moto).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Final

import boto3  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from pgbridge.embedded._process import wait_for
from tests.support.daemons import DaemonGroup
from tests.support.ports import free_port

HOST: Final = "127.0.0.1"
START_TIMEOUT_S: Final = 60.0
# moto accepts any credentials; these are its documented test values, not secrets.
ACCESS_KEY: Final = "testing"
SECRET_KEY: Final = "testing"
REGION: Final = "us-east-1"


class S3Server:
    """moto's S3 on ``endpoint``; ``close()`` kills it (and every object with it)."""

    def __init__(self) -> None:
        self.group = DaemonGroup("pgbridge-s3-")
        self.port = free_port()

    def __repr__(self) -> str:
        return f"<S3Server {self.endpoint}>"

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> S3Server:
        with self.group.starting("moto's S3 server"):
            self.group.start("moto", [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)])
            wait_for(self._ready, timeout=START_TIMEOUT_S, interval=0.2, what=f"moto's S3 on {self.endpoint}")
        return self

    def _ready(self) -> bool:
        self.group.check_alive()
        try:
            self.client.list_buckets()
        except (OSError, BotoCoreError, ClientError):
            return False
        return True

    @functools.cached_property
    def client(self) -> Any:
        """A boto3 S3 client of this server (signed requests: moto refuses anonymous object reads)."""
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY)

    def create_bucket(self, name: str) -> None:
        self.client.create_bucket(Bucket=name)

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key in ``bucket`` under ``prefix`` (all pages)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(str(item["Key"]) for page in pages for item in page.get("Contents", []))

    def read(self, bucket: str, key: str) -> bytes:
        body: bytes = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for ``s3a://`` paths on this server (driver and executors)."""
        return {"spark.hadoop.fs.s3a.endpoint": self.endpoint,
                "spark.hadoop.fs.s3a.endpoint.region": REGION,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
                "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
                "spark.hadoop.fs.s3a.aws.credentials.provider":
                    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}

    def logs(self) -> str:
        return self.group.logs()

    def close(self) -> None:
        self.group.close()


def start_s3() -> S3Server:
    return S3Server().start()
