"""The channel interface, the outcome of one send, and the registry of channel kinds.

A channel sends alerts to one destination, always as typed :class:`aldebaran.model.Alert` (never dicts: a
kind reads its fields, and sends ``alert.body()`` to machines, the exact bytes the alert arrived as).
``send(alert, idempotency_key) -> receipt`` raises
RetryableError (try again later), OutcomeUnknown (a RetryableError: the request may have arrived) or
PermanentError (never succeeds). ``send_many(alerts) -> [Outcome]`` sends a ledger run: one Outcome
per alert, in order, and never raises for one alert's failure.

Every channel is sent ledger runs of up to `max_run` alerts (one claim, one record per run). What a
channel declares decides what happens after a crash between a run's send and its record:

- `can_dedupe`: the provider honours the idempotency key (the alert id): the run's pending alerts
  are sent again, and a repeat beyond the dispatcher's dedupe window is harmless;
- `has_lookup`: the channel can say whether it has a message (`lookup`): each pending alert is
  looked up, found ones are recorded delivered, only the others are sent. `lookup_lags` (the
  default) means the provider's log may lag a send by seconds, so the alerts go IN_DOUBT first and
  the sweep asks after ``ALDEBARAN_DELIVERY_LOOKUP_GRACE_SECONDS``; a channel whose lookup is exact
  at once (the log file) is asked right away;
- neither: the pending alerts become IN_DOUBT for an operator, never re-sent automatically. Runs
  default to `concurrency` alerts there, so a crash puts at most that many into doubt.

`remembers_sent`: the channel itself never sends a key twice (it keeps a sent-log and checks it), so
repeats of an alert id beyond the dedupe window need nothing from the ledger. A channel that can
neither deduplicate nor remember gets a sent marker per alert in the ledger instead.

`delivery_promise`: what the kind promises about each alert at its recipient, one :class:`Promise`
(docs/operations.md § Channels: what each one promises). Every registered kind declares it
(``@register`` refuses one that does not); `lookup_promise` is the promise with an optional provider
lookup turned on (SMS ``lookup: true``). Derived from the flags above, never wider: ``can_dedupe`` only
says a resend carries the same key, not that the recipient drops it.

`fast`: the channel opted in to the low-latency lane (``"fast": true`` in its connection's extra, read
by :func:`aldebaran.delivery.channels.config.channel_from_connection` for every kind): it is also
delivered from the fast alerts topic (:mod:`aldebaran.delivery.fast`), and both lanes keep sent markers
for it, so whichever copy of an alert comes second is recognised as already delivered.

Kinds register by name, like the audit rules: ``@register("webhook", conn_types=("http", "https"))``
on the class; :data:`KINDS` (kind → class) and :data:`CONN_TYPES` (connection type → kind) follow.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from aldebaran.delivery.exceptions import OutcomeUnknown, PermanentError, RetryableError
from aldebaran.model import Alert

if TYPE_CHECKING:
    from aldebaran.delivery.channels.connection import Connection

Status = Literal["delivered", "retry", "permanent", "unknown"]
DEDUPE_MAX_RUN = 5000  # alerts per ledger run where a crash costs no doubt (ALDEBARAN_DELIVERY_RUN_MAX caps it too)
DEFAULT_CONCURRENCY = 16


class Promise(str, enum.Enum):
    """A channel's delivery promise in one word (the README and docs/operations.md claim no more)."""

    # The recipient deduplicates by our key (a resend is dropped there), or we settle doubt by its lookup.
    EXACTLY_ONCE = "exactly-once"
    # A send that may have happened is never repeated automatically: it goes IN_DOUBT for an operator.
    AT_MOST_ONCE_IN_DOUBT = "at-most-once+in-doubt"
    # Uncertain sends and a crashed run are sent again under the same key; the recipient may keep both.
    AT_LEAST_ONCE_STABLE_KEY = "at-least-once-stable-key"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one alert of a ``send_many``: delivered (with the provider's receipt), retry
    (nothing was sent, or it is safe to send again), permanent (never succeeds) or unknown (it may
    have been sent: on a channel that cannot deduplicate, the delivery is in doubt)."""

    alert_id: str
    status: Status
    receipt: dict | None = None
    error: str | None = None

    @classmethod
    def delivered(cls, alert_id: str, receipt: dict) -> "Outcome":
        return cls(alert_id, "delivered", receipt, None)

    @classmethod
    def retry(cls, alert_id: str, error: str) -> "Outcome":
        return cls(alert_id, "retry", None, error)

    @classmethod
    def permanent(cls, alert_id: str, error: str) -> "Outcome":
        return cls(alert_id, "permanent", None, error)

    @classmethod
    def unknown(cls, alert_id: str, error: str) -> "Outcome":
        return cls(alert_id, "unknown", None, error)

    @classmethod
    def failed(cls, alert_id: str, exc: RetryableError | PermanentError) -> "Outcome":
        """The outcome a channel error stands for."""
        if isinstance(exc, OutcomeUnknown):
            return cls.unknown(alert_id, str(exc))
        if isinstance(exc, PermanentError):
            return cls.permanent(alert_id, str(exc))
        return cls.retry(alert_id, str(exc))

    def result(self) -> dict:
        """The receipt if delivered; else raise the error this outcome stands for (the inverse of
        :meth:`failed`: a ``send`` built on a batch path uses it)."""
        if self.status == "delivered":
            return self.receipt or {}
        error = {"unknown": OutcomeUnknown, "permanent": PermanentError}.get(self.status, RetryableError)
        raise error(self.error or self.status)


class Channel:
    """Base class of the channel kinds. A subclass sets `can_dedupe`, implements ``send`` and
    ``from_connection``, and overrides ``send_many`` where the provider has a faster way to send many.

    The default ``send_many`` runs ``send`` over a pool of `concurrency` threads, created on first use
    and kept until :meth:`close`. ``close`` is idempotent; a closed channel re-creates what it needs if
    it is used again."""

    kind: ClassVar[str] = ""  # set by @register
    can_dedupe: ClassVar[bool] = False
    has_lookup: bool = False
    lookup_lags: ClassVar[bool] = True
    remembers_sent: ClassVar[bool] = False
    fast: bool = False  # delivered from the fast lane too (set from the connection's extra, module docstring)
    # What the kind can promise, shown by docs/operations.md's channel table and the Deliveries page
    # (:meth:`promise`): the provider's deduplication key carrying the alert id (None: it cannot
    # deduplicate), what happens to a send that may have happened, and the provider's published rate.
    dedupe_key: ClassVar[str | None] = None
    in_doubt_policy: ClassVar[str] = "IN_DOUBT for an operator: never re-sent automatically"
    provider_rate: ClassVar[str | None] = None
    # Declared by each kind (no default here, so a kind cannot inherit a promise by accident: module docstring).
    delivery_promise: ClassVar[Promise]
    lookup_promise: ClassVar[Promise | None] = None

    @classmethod
    def promise(cls, lookup: bool = False) -> dict[str, Any]:
        """The kind's promise (class attributes above), as the docs and the Deliveries page show it;
        `lookup`: with the provider lookup turned on (where the kind has one)."""
        word = cls.lookup_promise if lookup and cls.lookup_promise else cls.delivery_promise
        return {"kind": cls.kind, "promise": word.value,
                "promise_with_lookup": cls.lookup_promise.value if cls.lookup_promise else None,
                "dedupe": cls.can_dedupe, "dedupe_key": cls.dedupe_key,
                "in_doubt": cls.in_doubt_policy, "provider_rate": cls.provider_rate}

    @property
    def delivers(self) -> Promise:
        """This channel's promise as configured (its lookup on or off)."""
        return self.lookup_promise if self.has_lookup and self.lookup_promise else self.delivery_promise

    def __init__(self, name: str, *, concurrency: int = DEFAULT_CONCURRENCY, max_run: int | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"{self.kind or 'channel'} {name}: concurrency must be at least 1")
        if max_run is not None and max_run < 1:
            raise ValueError(f"{self.kind or 'channel'} {name}: max_run must be at least 1")
        self.name = name
        self.concurrency = concurrency
        # Without deduplication a crash may put a whole run in doubt: keep runs to one window of sends.
        self.max_run = max_run if max_run is not None else (DEDUPE_MAX_RUN if self.can_dedupe else concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def from_connection(cls, name: str, conn: "Connection") -> "Channel":
        raise NotImplementedError

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        """Send one alert; the receipt (JSON-able, no secrets) goes into the delivery record."""
        raise NotImplementedError

    def send_many(self, alerts: Sequence[Alert]) -> list[Outcome]:
        """Send a run: one Outcome per alert, same order; the idempotency key is the alert id.
        Only channel errors become outcomes: anything else is a bug and propagates (the ledger then
        treats the run as crashed, which is safe on a channel that deduplicates)."""
        if len(alerts) <= 1:
            return [self._send_one(a) for a in alerts]
        return list(self._executor().map(self._send_one, alerts))

    def _send_one(self, alert: Alert) -> Outcome:
        try:
            return Outcome.delivered(alert.alert_id, self.send(alert, alert.alert_id))
        except (RetryableError, PermanentError) as exc:
            return Outcome.failed(alert.alert_id, exc)

    def lookup(self, alert_id: str) -> dict | None:
        """Only where `has_lookup`: the provider's record of the message sent with reference
        `alert_id` (a receipt), or None if it has none. RetryableError if it cannot tell now."""
        raise NotImplementedError(f"{self.kind} channel {self.name} has no lookup")

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"send-{self.name}")
            return self._pool

    def close(self) -> None:
        """Release threads and connections (waits for sends in progress). Idempotent."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- the registry -----------------------------------------------------------------------------------
KINDS: dict[str, type[Channel]] = {}
CONN_TYPES: dict[str, str] = {}


def register(kind: str, conn_types: Sequence[str] = ()) -> Callable[[type[Channel]], type[Channel]]:
    """Class decorator: channel kind `kind`, built from connections whose conn_type is `kind` or one
    of `conn_types` (Airflow's ``conn_type``, lower case, ``-`` read as ``_``)."""

    def add(cls: type[Channel]) -> type[Channel]:
        if kind in KINDS and KINDS[kind] is not cls:
            raise ValueError(f"channel kind {kind!r} registered twice ({KINDS[kind].__name__}, {cls.__name__})")
        types = dict.fromkeys((kind, *conn_types))
        taken = {t: CONN_TYPES[t] for t in types if CONN_TYPES.get(t, kind) != kind}
        if taken:
            raise ValueError(f"channel kind {kind!r}: conn_type(s) already taken: {taken}")
        if not isinstance(getattr(cls, "delivery_promise", None), Promise):
            raise TypeError(f"channel kind {kind!r} ({cls.__name__}) must declare delivery_promise (a Promise)")
        cls.kind = kind
        KINDS[kind] = cls
        CONN_TYPES.update((t, kind) for t in types)
        return cls

    return add


__all__ = ["CONN_TYPES", "Channel", "DEDUPE_MAX_RUN", "DEFAULT_CONCURRENCY", "KINDS", "Outcome", "OutcomeUnknown",
           "PermanentError", "Promise", "RetryableError", "Status", "register"]
