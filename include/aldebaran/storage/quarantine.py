"""Quarantine: where a corrupt stored object goes, so that no process stops for it (BRIEF §2).

A process that reads an object it cannot use (undecodable JSON, JSON that is not an object, a missing or
ill-typed field, an odd key) copies it, byte for byte, to ``<quarantine prefix><original key>`` and
writes beside it ``<...>.why.json``: {"key", "reason", "reader", "at", "size"}. The caller then takes
it off the live path (deletes it, or overwrites it with a fresh object under its write condition) and
carries on with the rest; the warning in the log names the key and the reason. An operator reads the
copy, repairs or drops it (docs/operations.md, "Quarantine"); nothing re-reads the quarantine by itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time

from aldebaran.exceptions import NotFound

log = logging.getLogger(__name__)

PREFIX = "quarantine/"
WHY = ".why.json"


def quarantine(store, key: str, reason: str, reader: str, body: bytes | None = None, prefix: str = PREFIX,
               remove: bool = True) -> str | None:
    """Copy `key` (its `body`, if the caller holds it) into the quarantine with its reason; delete the
    original unless `remove` is False (the caller replaces it under a condition). The copy's key, or None
    when the object is already gone. ObjectStoreError propagates: nothing is removed before the copy lands."""
    if body is None:
        try:
            body = store.get(key).body
        except NotFound:
            return None
    where = copy_key(key, prefix)
    try:
        store.put(where, body, "application/octet-stream")
    except ValueError:  # a key that no prefix can hold (the directory backend refuses it): by its digest
        where = _odd(prefix, key)
        store.put(where, body, "application/octet-stream")
    why = {"key": key, "reason": reason[:2000], "reader": reader, "at": time.time(), "size": len(body)}
    store.put(where + WHY, json.dumps(why).encode())
    if remove:
        store.delete(key)
    log.warning("quarantined %s (%s, read by %s) as %s", store.uri(key), reason, reader, store.uri(where))
    return where


def copy_key(key: str, prefix: str = PREFIX) -> str:
    """Where the copy of `key` goes: under `prefix`, or by its digest when that name would be refused
    where the original's was not (:func:`_fits`)."""
    where = prefix + key
    return where if _fits(where + WHY) else _odd(prefix, key)


def _odd(prefix: str, key: str) -> str:
    return f"{prefix}odd/{hashlib.sha256(key.encode()).hexdigest()}"


def _fits(key: str) -> bool:
    """Whether an object store takes `key`: S3's 1024 bytes, and MinIO's 255 per segment (a file name).
    An odd key near those bounds fits, its quarantine copy (prefix and ``.why.json`` added) may not; the
    store's refusal would be an ObjectStoreError like an outage's, and the sweep would retry it for ever
    (found by `aldebaran chaos fuzz`)."""
    raw = key.encode("utf-8", "surrogatepass")
    return len(raw) <= 1024 and all(len(part) <= 255 for part in raw.split(b"/"))


def listed(store, prefix: str = PREFIX) -> list[dict]:
    """What is in the quarantine: each copy's why ({"key", "reason", "reader", "at", "size", "copy"})."""
    out = []
    for obj in store.list(prefix):
        if obj["Key"].endswith(WHY):
            try:
                why = json.loads(store.get(obj["Key"]).body)
            except NotFound:
                continue  # an operator removed it meanwhile
            except ValueError:
                why = {"reason": "its .why.json cannot be read"}
            out.append({**(why if isinstance(why, dict) else {}), "copy": obj["Key"][: -len(WHY)]})
    return out
