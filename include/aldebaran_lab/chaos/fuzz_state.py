"""`aldebaran chaos fuzz`, the processes' own state in the store: heartbeats, checkpoint leases, plan.json.

The same method as aldebaran_lab.chaos.fuzz_store (hostile variants of a real object under its real key,
in the campaign's own bucket, read by the real reader), for the objects outside the delivery ledger:

- heartbeats (``heartbeats/dispatcher/<name>.json``): aldebaran.runtime.heartbeat.read / read_all, what every
  supervisor, page and probe reads; a corrupt one is skipped and logged (read as no heartbeat);
- checkpoint leases: aldebaran.runtime.lease.acquire, an auditor starting on the checkpoint; a corrupt lease is
  quarantined and revoked (free after the taker's ttl), or the taker gets LeaseHeld naming the holder;
- the books' ``plan.json``: aldebaran.audit.sparkjob.plans.read_recorded at an auditor's start; a corrupt
  one stops it with AuditorError and the reason (a guessed plan would read the books wrongly).
"""

from __future__ import annotations

import os
import socket
import time

from aldebaran_lab.chaos.fuzz_inputs import draw, hostile_documents
from aldebaran_lab.chaos.fuzz_store import Tally, Warnings, each, is_quarantined


def heartbeats(store, n: int, seed: int) -> dict:
    from aldebaran.runtime import heartbeat

    now = time.time()
    template = {"host": socket.gethostname(), "pid": os.getpid(), "metrics": None, "name": "fz", "status": "running",
                "at": now, "started_at": now, "channels": ["webhook"],
                "progress": {"webhook": {"progress_at": now, "loop_at": now, "pending": False}}}
    bodies, _ = draw(hostile_documents(template), n, seed=seed)
    tally = Tally("heartbeats")
    with Warnings() as warnings:
        def one(i: int, body: bytes):
            name = f"fz{i:08d}"
            store.put(heartbeat.key(heartbeat.DISPATCHER, name), body)
            try:
                got = heartbeat.read(store, heartbeat.DISPATCHER, name)
            except Exception as exc:  # noqa: BLE001 - a crash is the finding
                return "crashes", exc
            where = store.uri(heartbeat.key(heartbeat.DISPATCHER, name))
            return ("accepted" if isinstance(got, dict) else "reported" if warnings.names(where)
                    else "unaccounted"), None

        for body, (verdict, exc) in zip(bodies, each(one, range(len(bodies)), bodies)):
            tally.add(verdict, body, exc)
        try:
            heartbeat.read_all(store, heartbeat.DISPATCHER)  # the listing readers (pages, wake-ups)
        except Exception as exc:  # noqa: BLE001
            tally.add("crashes", b"(read_all)", exc)
    return tally.result()


def leases(store, n: int, seed: int) -> dict:
    from aldebaran.runtime import lease
    from aldebaran.exceptions import LeaseHeld
    from aldebaran.storage.quarantine import PREFIX

    now = time.time()
    template = {"checkpoint": "s3a://b/cp", "query": "q", "state": lease.HELD, "owner": "o", "host": "elsewhere",
                "pid": 1, "acquired_at": now, "renewed_at": now, "expires_at": now - 1, "ttl_seconds": 30.0,
                "note": None, "generation": 3}
    bodies, _ = draw(hostile_documents(template), n, seed=seed)
    tally = Tally("leases")
    def one(i: int, body: bytes):
        checkpoint = f"s3a://{store.bucket}/fuzz/cp-{i}"
        key = lease.lease_key(checkpoint)
        store.put(key, body)
        try:
            # A corrupt lease is revoked for the taker's ttl: a short one, so that the taker then gets it.
            lease.acquire(store, checkpoint, "fuzz", ttl_seconds=0.001, wait_seconds=0.05, poll=0.01)
        except LeaseHeld:
            return "accepted", None  # a well-formed lease of a live holder: the named refusal
        except Exception as exc:  # noqa: BLE001
            return "crashes", exc
        return ("quarantined" if is_quarantined(store, key, PREFIX) else "accepted"), None

    for body, (verdict, exc) in zip(bodies, each(one, range(len(bodies)), bodies)):
        tally.add(verdict, body, exc)
    return tally.result()


def plans(store, n: int, seed: int) -> dict:
    from aldebaran.audit.sparkjob.plans import read_recorded
    from aldebaran.audit.state.files import files_for
    from aldebaran.runtime.checkpoint import PLAN, Checkpoint
    from aldebaran.exceptions import AuditorError

    template = {"plan": "copartitioned", "shards": 4, "parser": "python", "partitioner": "murmur2"}
    bodies, _ = draw(hostile_documents(template), n, seed=seed)
    tally = Tally("plans")
    root = Checkpoint(f"s3a://{store.bucket}/fuzz").books
    files = files_for(root)
    for body in bodies:
        files.put(PLAN, body)
        try:
            read_recorded(root)
            tally.add("accepted")
        except AuditorError as exc:
            tally.add("reported" if PLAN in str(exc) else "unaccounted")
        except Exception as exc:  # noqa: BLE001
            tally.add("crashes", body, exc)
    return tally.result()
