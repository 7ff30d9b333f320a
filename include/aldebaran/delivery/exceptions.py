"""The delivery package's exceptions: what a channel raises for one send, and the malformed alert.

A channel translates its provider's errors (HTTP statuses, aiohttp, SMTP, librdkafka) into these at
its boundary; the ledger turns each into a state (:class:`~aldebaran.delivery.channels.Outcome`).
"""

from aldebaran.model import AlertError


class RetryableError(Exception):
    """Temporary failure: the ledger schedules a retry with backoff."""


class OutcomeUnknown(RetryableError):
    """The request may have reached the provider before the failure (read timeout, connection lost
    after sending). Safe to retry where the provider deduplicates by the idempotency key; on a channel
    that cannot (SMS) a retry may send a second message, so the delivery is in doubt."""


class PermanentError(Exception):
    """The provider refused the alert for good: the ledger marks it DEAD."""


__all__ = ["AlertError", "OutcomeUnknown", "PermanentError", "RetryableError"]


class ConsumerFatal(Exception):
    """A channel's Kafka consumer is unusable (librdkafka's fatal error, e.g. a static member fenced while
    the group's coordinator moved): the dispatcher replaces it with a new one."""
