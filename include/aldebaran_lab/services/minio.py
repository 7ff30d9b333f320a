"""MinIO on 127.0.0.1 (built by `make setup` with `go install`), credentials from the generated .env."""

from __future__ import annotations

import logging
import os
import urllib.request
from urllib.parse import urlparse

from aldebaran.runtime import paths
from aldebaran.exceptions import ConfigError
from aldebaran.settings import ObjectStoreSettings, load
from aldebaran_lab.services.base import Service

log = logging.getLogger(__name__)



def minio_health(address: str, check: str = "ready") -> bool:
    """MinIO's health endpoint ``/minio/health/<check>`` at ``address`` (host:port) answers 200: ``ready``
    (this server serves), ``live``, or ``cluster`` (the cluster has write quorum as seen from it)."""
    try:
        with urllib.request.urlopen(f"http://{address}/minio/health/{check}", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False

class MinIO(Service):
    name = "minio"
    start_timeout = 60.0

    def __init__(self) -> None:
        super().__init__()
        self.settings = load(ObjectStoreSettings)
        url = urlparse(self.settings.endpoint() or "http://127.0.0.1:9000")
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 9000
        self.address = f"{self.host}:{self.port}"
        self.data = self.home / "data"

    def environment(self) -> dict[str, str]:
        s = self.settings
        if not (s.access_key and s.secret_key):
            raise ConfigError(
                "ALDEBARAN_S3_ACCESS_KEY / ALDEBARAN_S3_SECRET_KEY must be set to start MinIO "
                "(`aldebaran services up` generates them into .env)"
            )
        env = dict(os.environ)
        env["MINIO_ROOT_USER"] = s.access_key.get_secret_value()
        env["MINIO_ROOT_PASSWORD"] = s.secret_key.get_secret_value()
        env["MINIO_BROWSER"] = "off"
        env["MINIO_UPDATE"] = "off"
        return env

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        return [str(paths.minio_binary()), "server", str(self.data), "--address", self.address, "--quiet"]

    def healthy(self) -> bool:
        return minio_health(self.address)

    def after_start(self) -> None:
        from aldebaran.storage.store import S3Store

        if S3Store(self.settings).ensure_bucket():
            log.info("minio: created bucket %s", self.settings.bucket)
