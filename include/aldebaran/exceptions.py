"""The package's exceptions. Low-level errors (botocore, confluent-kafka, subprocess) are translated
into these at the boundary, with enough context to act on."""


class AldebaranError(Exception):
    """Base class of every error the package raises on purpose."""


class ConfigError(AldebaranError):
    """A setting is missing or invalid. The message names the setting (its env var / CLI flag)."""


class ServiceError(AldebaranError):
    """A local service failed to start, stop or become healthy. The message names its log file."""


class SetupError(AldebaranError):
    """Something `make setup` installs is missing (venv, jars, MinIO binary)."""


class ObjectStoreError(AldebaranError):
    """The object store could not be reached or answered unexpectedly."""


class AlreadyExists(ObjectStoreError):
    """A conditional create (If-None-Match: *) found the key already present: someone else owns it."""


class PreconditionFailed(ObjectStoreError):
    """A conditional update (If-Match: <etag>) lost the race: the object changed since it was read."""


class NotFound(ObjectStoreError):
    """The key does not exist."""


class AuditorError(AldebaranError):
    """The streaming auditor could not start or stopped with an error."""


class DispatcherError(AldebaranError):
    """A streaming dispatcher could not be started by its supervisor; the message names its log."""


class LeaseHeld(AldebaranError):
    """Another live auditor holds the checkpoint's lease: two auditors must never share a checkpoint."""


class LeaseLost(AldebaranError):
    """This auditor's checkpoint lease was taken over, revoked or could not be renewed in time."""


class PlatformUnhealthy(AldebaranError):
    """A platform health check failed; the message lists every problem found."""


class LedgerCorrupt(AldebaranError):
    """A delivery-ledger object cannot be parsed (or its index key is odd). The message names its key;
    `key` and `reason` let the reader quarantine it (aldebaran.storage.quarantine): nothing is sent on the strength
    of an unreadable object, and no process stops for one."""

    def __init__(self, message: str, key: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.key, self.reason = key, reason or message


class Fenced(AldebaranError):
    """A dispatcher is no longer the owner of a channel's partition (a newer epoch took it over)."""


class AlertNotFound(AldebaranError):
    """No alert with this id on the alerts topic nor in the delivery ledger (`aldebaran explain`)."""
