"""`aldebaran chaos fuzz`, the object store: hostile bytes under the real keys, read by the real readers.

One kind at a time: delivery records and index keys (read by the dispatcher's sweep, which quarantines),
runs (listed by the readers that only look, then read and set aside as the settle step does), partition
owners (taken by a dispatcher), heartbeats (read by every supervisor), checkpoint leases (taken by an
auditor) and the books' plan.json (read at an auditor's start). Each input is a structure-aware variant
of a real object of its kind (aldebaran_lab.chaos.fuzz_inputs). Everything is written to a bucket of the
campaign's own: heartbeats and leases have fixed keys, which the shared platform's supervisors read.

Verdict per input: the reader returned or raised its kind's named error (0 crashes), and a corrupt object
is quarantined (a ``.why.json`` beside the copy) or reported with a reason (a reader that only looks
skips it and logs or lists it); whatever is neither was read as valid ("accepted").
"""

from __future__ import annotations

import collections
import json
import logging
import time
import uuid

from aldebaran_lab.chaos.fuzz_inputs import draw, hostile_documents

log = logging.getLogger(__name__)

CHANNEL, TOPIC, BATCH = "webhook", "alerts", 200
PLACEHOLDER = b"fzXXXXXXXX"  # the alert id in a record template; each input gets its own of the same length


class Tally:
    """One target's counts, and the first crashes in full."""

    def __init__(self, kind: str) -> None:
        self.kind, self.counts, self.examples, self.t0 = kind, collections.Counter(), [], time.monotonic()

    def add(self, verdict: str, body: bytes = b"", exc: BaseException | None = None) -> None:
        self.counts[verdict] += 1
        if verdict in ("crashes", "unaccounted") and len(self.examples) < 5:
            self.examples.append({"input": body[:120], "error": f"{type(exc).__name__}: {str(exc)[:200]}" if exc
                                  else verdict})

    def result(self) -> dict:
        return {"inputs": sum(self.counts.values()), **{k: self.counts.get(k, 0) for k in (
            "crashes", "quarantined", "reported", "accepted", "unaccounted", "unstorable")},
            "crash_examples": self.examples, "seconds": round(time.monotonic() - self.t0, 1)}


class Warnings(logging.Handler):
    """What the readers log: a reader that only looks reports a corrupt object there, by its key. A context
    manager on `logger` (its level lowered to WARNING meanwhile if above: a quiet configuration must not hide them)."""

    def __init__(self, logger: str = "aldebaran") -> None:
        super().__init__(logging.WARNING)
        self.text: list[str] = []
        self.logger, self.level = logging.getLogger(logger), None

    def __enter__(self) -> "Warnings":
        self.level = self.logger.level
        if self.logger.getEffectiveLevel() > logging.WARNING:
            self.logger.setLevel(logging.WARNING)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level)

    def emit(self, record: logging.LogRecord) -> None:
        self.text.append(record.getMessage())

    def names(self, key: str) -> bool:
        return any(key in t for t in self.text)


def private_store():
    from aldebaran.settings import ObjectStoreSettings, load
    from aldebaran.storage.store import S3Store

    store = S3Store(load(ObjectStoreSettings, bucket=f"chaos-fuzz-{uuid.uuid4().hex[:8]}"))
    store.ensure_bucket()
    return store


def drop_store(store) -> None:
    try:
        store.delete_prefix("")
    except Exception:  # noqa: BLE001 - a batch delete's XML cannot carry every odd key: one at a time
        for obj in list(store.list("")):
            store.delete(obj["Key"])
    try:
        store.client.delete_bucket(Bucket=store.bucket)
    except Exception as exc:  # noqa: BLE001 - never the campaign's verdict: a key the store will not delete
        left = [o["Key"] for o in store.list("")]
        log.warning("fuzz: bucket %s not removed (%s); %d object(s) left, e.g. %r", store.bucket, exc, len(left),
                    left[:3])


def each(fn, *items) -> list:
    """`fn` over the items, a few at a time: one round trip to the store is most of an input's cost."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(fn, *items))


def _batches(items: list, size: int = BATCH):
    for i in range(0, len(items), size):
        yield i, items[i:i + size]


# --- the ledger: records, index keys, runs, owners ---------------------------------------------------------------
def _dispatcher(ledger, kafka):
    from aldebaran.delivery.channels.log import LogChannel
    from aldebaran.delivery.decode import AlertDeadLetters
    from aldebaran.delivery.dispatcher import ChannelDispatcher
    from aldebaran.delivery.stats import DispatchStats
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.runtime import paths

    out = paths.run_dir() / "chaos" / f"fuzz-log-{uuid.uuid4().hex[:8]}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    return ChannelDispatcher(LogChannel(CHANNEL, out), ledger, DeliverySettings(prefix=ledger.prefix), kafka,
                             "fuzz", "fuzz", DispatchStats(), AlertDeadLetters(kafka))


def is_quarantined(store, key: str, prefix: str) -> bool:
    """Whether `key` has a copy with its reason in the quarantine at `prefix` (aldebaran.storage.quarantine)."""
    from aldebaran.exceptions import NotFound
    from aldebaran.storage.quarantine import WHY, copy_key

    try:
        return bool(json.loads(store.get(copy_key(key, prefix) + WHY).body).get("reason"))
    except NotFound:
        return False


def records(ledger, kafka, n: int, seed: int) -> dict:
    """Records under their keys and the retry index: the dispatcher's sweep reads each and quarantines."""
    from aldebaran.delivery.channels.base import Outcome
    from aldebaran.delivery.channels.log import LogChannel
    from aldebaran.exceptions import AldebaranError
    from aldebaran.model import Alert

    alert = Alert.from_dict({"alert_id": PLACEHOLDER.decode(), "kind": "OVERFILL", "order_id": "o", "client": "c",
                             "stock": "s", "requested": 100, "purchased": 120})
    ledger.attempt(LogChannel(CHANNEL), alert, "w").report(Outcome.retry(alert.alert_id, "HTTP 503"))
    template = json.loads(ledger.store.get(ledger.key(CHANNEL, alert.alert_id)).body)
    ledger.store.delete(ledger.key(CHANNEL, alert.alert_id))
    ledger.unmark("retry", CHANNEL, alert.alert_id)
    bodies, _ = draw(hostile_documents(template), n, seed=seed)
    tally, sweeper = Tally("records"), _dispatcher(ledger, kafka)
    for start, batch in _batches(bodies):
        ids = [f"fz{start + i:08d}" for i in range(len(batch))]
        def plant(alert_id, body):
            ledger.store.put(ledger.key(CHANNEL, alert_id), body.replace(PLACEHOLDER, alert_id.encode()))
            ledger.store.put(ledger.index_key("retry", CHANNEL, alert_id), b"")

        each(plant, ids, batch)
        try:
            sweeper.sweep()
        except Exception as exc:  # noqa: BLE001 - a crash is the finding: which input, in-process
            _blame(tally, ledger, ids, batch, exc)
            continue
        def verdict(alert_id):
            if is_quarantined(ledger.store, ledger.key(CHANNEL, alert_id), ledger.quarantine_prefix()):
                return "quarantined"
            try:
                return "accepted" if ledger.get(CHANNEL, alert_id) is not None else "unaccounted"
            except AldebaranError:
                return "unaccounted"

        for alert_id, body, got in zip(ids, batch, each(verdict, ids)):
            tally.add(got, body)
    return tally.result()


def _blame(tally: Tally, ledger, ids: list, batch: list, exc: BaseException) -> None:
    from aldebaran.delivery.records import Record
    from aldebaran.exceptions import LedgerCorrupt

    for alert_id, body in zip(ids, batch):
        try:
            Record.from_bytes(body.replace(PLACEHOLDER, alert_id.encode()))
            tally.add("accepted")
        except LedgerCorrupt:
            tally.add("reported")
        except Exception as err:  # noqa: BLE001
            tally.add("crashes", body, err)
    if not tally.counts["crashes"]:
        tally.add("crashes", b"(the sweep)", exc)


def index_keys(ledger, kafka, n: int, seed: int) -> dict:
    """Odd names in the retry index (a key no ledger writes): the sweep quarantines each."""
    from hypothesis import strategies as st

    from aldebaran.exceptions import ObjectStoreError

    names = st.one_of(st.text(min_size=1, max_size=60), st.text(alphabet="./\\-_ \x00\n%", min_size=1, max_size=8),
                      # ≤ 250: MinIO refuses a key segment over 255 bytes, and `<id>.json` must fit (see the report)
                      st.integers(130, 250).map(lambda k: "x" * k),
                      st.sampled_from(["..", ".", "a..b", "-x", ".hidden", "é", "\u202e", "a b", "a%2Fb"]))
    # One segment each: with a "/" two odd names can be a file and a directory of one name on MinIO's disk
    # layout, which it resolves its own way (not the ledger's to answer).
    odd, _ = draw(names.map(lambda s: s.replace("/", "%").encode("utf-8", "surrogatepass")), n, seed=seed)
    tally, sweeper = Tally("index_keys"), _dispatcher(ledger, kafka)
    base = f"{ledger.prefix}-index/retry/{CHANNEL}/"
    for _, batch in _batches(odd):
        planted = []
        for name in batch:
            try:
                key = base + name.decode("utf-8")
                ledger.store.put(key, b"")
                planted.append(key)
            except (UnicodeDecodeError, ObjectStoreError, ValueError):
                tally.add("unstorable")  # the store refuses the key: no reader can meet it
        try:
            sweeper.sweep()
        except Exception as exc:  # noqa: BLE001
            tally.add("crashes", b"(the sweep over odd index keys)", exc)
            continue
        left = {o["Key"] for o in ledger.store.list(base)}
        aside = each(lambda k: is_quarantined(ledger.store, k, ledger.quarantine_prefix()), planted)
        for key, moved in zip(planted, aside):
            # Not odd (a plain id without a record): the sweep finds no record and drops the entry.
            tally.add("quarantined" if moved else "accepted" if key not in left else "unaccounted", key.encode())
    return tally.result()


def runs(ledger, n: int, seed: int) -> dict:
    """Runs of one partition: listed by the readers that only look (reported), then each read as the settle
    step reads it and set aside (quarantined, left in place)."""
    from aldebaran.delivery.corrupt import set_aside
    from aldebaran.delivery.runs import Run
    from aldebaran.exceptions import LedgerCorrupt

    template = json.loads(Run.claim(CHANNEL, TOPIC, 0, [[0, "a", "?", None]], 1, "w", time.time()).to_bytes())
    bodies, _ = draw(hostile_documents(template), n, seed=seed)
    tally = Tally("runs")
    for start, batch in _batches(bodies):
        keys = [ledger.run_key(CHANNEL, TOPIC, 0, start + i) for i in range(len(batch))]
        each(ledger.store.put, keys, batch)
        corrupt: list = []
        try:
            list(ledger.runs(CHANNEL, TOPIC, 0, from_offset=start, until=start + len(batch) - 1, corrupt=corrupt))
        except Exception as exc:  # noqa: BLE001
            tally.add("crashes", b"(listing runs)", exc)
        reported = {c["key"] for c in corrupt}
        for key, body in zip(keys, batch):
            try:
                ledger.run_at(key)
                tally.add("reported" if key in reported else "accepted")
            except LedgerCorrupt as exc:
                set_aside(ledger, exc, "fuzz", CHANNEL)
                tally.add("quarantined" if key in reported and is_quarantined(
                    ledger.store, key, ledger.quarantine_prefix()) else "unaccounted")
            except Exception as exc:  # noqa: BLE001
                tally.add("crashes", body, exc)
    return tally.result()


def owners(ledger, n: int, seed: int) -> dict:
    """Partition owners: a dispatcher taking the partition reads each (a corrupt one quarantined, replaced)."""
    bodies, _ = draw(hostile_documents({"epoch": 3, "owner": "w", "since": time.time()}), n, seed=seed)
    tally = Tally("owners")
    for start, batch in _batches(bodies):
        def take(partition: int, body: bytes):
            key = ledger.owner_key(CHANNEL, TOPIC, partition)
            ledger.store.put(key, body)
            try:
                ledger.take_partition(CHANNEL, TOPIC, partition, "fuzz")
            except Exception as exc:  # noqa: BLE001
                return "crashes", exc
            moved = is_quarantined(ledger.store, key, ledger.quarantine_prefix())
            return ("quarantined" if moved else "accepted"), None

        for body, (verdict, exc) in zip(batch, each(take, range(start, start + len(batch)), batch)):
            tally.add(verdict, body, exc)
    return tally.result()
