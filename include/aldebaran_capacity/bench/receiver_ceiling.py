"""The test receivers' ceiling: how many requests (and alerts) per second one receiver process takes.

A delivery benchmark means something only while the receiver is not its bottleneck, so the benchmark
suite reports this ceiling next to the dispatch figures. :func:`ceiling` starts the receiver in a
process of its own (:class:`~aldebaran_capacity.receivers.ReceiverProcess`) and drives it from `clients`
separate processes, each an aiohttp client with keep-alive connections and `concurrency / clients`
requests in flight, every alert with a fresh id (so every request is accepted, the receiver's
normal path). Besides the rates it reports the receiver's CPU time, so the figure can be read as
"the receiver was saturated" or "the client was the limit" (``receiver_cpu_share`` < ~0.9), and
``requests_per_receiver_cpu_s`` extrapolates to a receiver owning a whole core.

Modes: ``ceiling("webhook")`` one alert per POST; ``ceiling("webhook", batch=100)`` batched POSTs;
``ceiling("sms")`` Twilio-style form POSTs with a Reference. From a shell::

    .venv/bin/python -c "from aldebaran_capacity.bench.receiver_ceiling import ceiling; print(ceiling('webhook'))"
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from urllib.parse import quote_plus

from aldebaran.delivery.channels import signed_headers
from aldebaran_capacity.receivers import BATCH_HEADER, ReceiverProcess
from aldebaran_capacity.receivers.base import new_event_loop

log = logging.getLogger(__name__)

SPEC_ENV = "ALDEBARAN_BENCH_CLIENT_SPEC"
_ALERT = ('{"alert_id":"%s","client":"Sendence","detected_at":%d,"kind":"OVERFILL","order_id":"%s",'
          '"purchase_count":2,"purchased":120,"requested":100,"stock":"AAPL","trigger_event_id":"p-%s",'
          '"trigger_event_ts":%d}')


def _requests(spec: dict):
    """Endless (headers, body, alerts) for one client, each alert with a fresh id."""
    kind, batch, tag = spec["kind"], spec["batch"], spec["tag"]
    secret = spec["secret"]
    n = 0
    if kind == "sms":
        auth = "Basic " + base64.b64encode(f"{spec['account_sid']}:{spec['auth_token']}".encode()).decode()
        while True:
            n += 1
            aid = f"{tag}-{n}"
            body = (f"To=%2B15552223333&From=%2B15550001111&Body={quote_plus(f'Aldebaran OVERFILL order {aid}')}"
                    f"&Reference={aid}").encode()
            yield {"Authorization": auth, "Content-Type": "application/x-www-form-urlencoded"}, body, 1
    while True:
        now = int(time.time() * 1000)
        alerts = []
        for _ in range(batch):
            n += 1
            aid = f"{tag}-{n}"
            alerts.append(_ALERT % (aid, now, aid, aid, now))
        if batch == 1:
            body, key = alerts[0].encode(), aid
        else:
            body, key = ('{"alerts":[' + ",".join(alerts) + "]}").encode(), f"{tag}-batch-{n}"
        headers = {"Content-Type": "application/json", "Idempotency-Key": key, **signed_headers(body, secret)}
        if batch > 1:
            headers[BATCH_HEADER] = str(batch)
        yield headers, body, batch


async def _drive_async(spec: dict, ready: Callable[[], Awaitable[None]]) -> dict:
    import aiohttp

    requests = _requests(spec)
    counts = {"requests": 0, "alerts": 0, "errors": 0, "warmup_alerts": 0}
    statuses: collections.Counter = collections.Counter()
    ok = 201 if spec["kind"] == "sms" or spec["batch"] == 1 else 200
    connector = aiohttp.TCPConnector(limit=spec["concurrency"], force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        async def one(count: bool) -> None:
            headers, body, alerts = next(requests)
            try:
                async with session.post(spec["url"], data=body, headers=headers) as resp:
                    await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                log.debug("request failed: %s", exc)
                counts["errors"] += 1
                return
            if not count:
                counts["warmup_alerts"] += alerts if status == ok else 0
                return
            statuses[status] += 1
            if status == ok:
                counts["requests"] += 1
                counts["alerts"] += alerts
            else:
                counts["errors"] += 1

        # Open the connections before the clock starts (these alerts are not counted), then wait for "go".
        await asyncio.gather(*(one(False) for _ in range(spec["concurrency"])))
        await ready()
        deadline = time.monotonic() + spec["seconds"]

        async def worker() -> None:
            while time.monotonic() < deadline:
                await one(True)

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(spec["concurrency"])))
        elapsed = time.monotonic() - t0
    return {**counts, "elapsed": elapsed, "statuses": dict(statuses)}


def _drive(spec: dict) -> dict:
    """A client process: opens `spec["concurrency"]` connections, says "ready" on stdout, waits for a
    line on stdin, then keeps that many requests in flight for `spec["seconds"]`; returns the counts."""

    async def ready() -> None:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    loop = new_event_loop()
    try:
        return loop.run_until_complete(_drive_async(spec, ready))
    finally:
        loop.close()


def ceiling(kind: str = "webhook", seconds: float = 5.0, concurrency: int = 64, batch: int = 1,
            clients: int = 1) -> dict:
    """Drive one receiver process of `kind` ("webhook" or "sms") for `seconds` with `concurrency`
    requests in flight (split over `clients` client processes), `batch` alerts per webhook POST.
    Returns requests/s, alerts/s, the receiver's CPU time and whether it received each alert once."""
    import psutil

    if kind == "sms" and batch != 1:
        raise ValueError("the SMS provider takes one message per request (batch=1)")
    if batch < 1 or clients < 1 or concurrency < clients:
        raise ValueError("batch and clients must be ≥ 1, concurrency ≥ clients")
    tag = uuid.uuid4().hex[:8]
    with ReceiverProcess(kind) as receiver:
        url = receiver.url + (receiver.path if kind == "sms" else "/alerts")
        specs = [{"kind": kind, "url": url, "secret": receiver.secret, "account_sid": receiver.account_sid,
                  "auth_token": receiver.auth_token, "batch": batch, "seconds": seconds, "tag": f"{tag}-{c}",
                  "concurrency": concurrency // clients + (c < concurrency % clients)} for c in range(clients)]
        proc = psutil.Process(receiver.pid)
        # Client processes of their own (not multiprocessing: that would re-import the caller's script).
        # Each gets its spec (secrets included) through the environment, opens its connections, says
        # "ready", and starts when told: the receiver's CPU is measured over the timed part only.
        drivers = [subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True, env={**os.environ, SPEC_ENV: json.dumps(spec)}) for spec in specs]
        try:
            if any(driver.stdout.readline().strip() != "ready" for driver in drivers):
                raise RuntimeError("a client process failed to start (its stderr is above)")
            cpu0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
            for driver in drivers:
                driver.stdin.write("go\n")
                driver.stdin.flush()
            outputs = [driver.communicate(timeout=seconds + 120)[0] for driver in drivers]
            cpu1, wall = sum(proc.cpu_times()[:2]), time.monotonic() - t0
        finally:
            for driver in drivers:
                if driver.poll() is None:
                    driver.kill()
                    driver.wait()
        stats = receiver.stats(summary=True)
    if any(d.returncode for d in drivers):
        raise RuntimeError(f"a client process failed (exit codes {[d.returncode for d in drivers]}; stderr above)")
    results = [json.loads(out) for out in outputs]
    elapsed = max(r["elapsed"] for r in results)
    requests, alerts = sum(r["requests"] for r in results), sum(r["alerts"] for r in results)
    warmup_alerts = sum(r["warmup_alerts"] for r in results)
    statuses: collections.Counter = collections.Counter()
    for r in results:
        statuses.update(r["statuses"])
    cpu = cpu1 - cpu0
    result = {
        "kind": kind, "batch": batch, "concurrency": concurrency, "clients": clients, "seconds": elapsed,
        "requests": requests, "alerts": alerts, "errors": sum(r["errors"] for r in results),
        "requests_per_s": requests / elapsed, "alerts_per_s": alerts / elapsed,
        "receiver_cpu_s": cpu, "receiver_cpu_share": cpu / wall,
        "requests_per_receiver_cpu_s": requests / cpu if cpu else float("nan"),
        "alerts_per_receiver_cpu_s": alerts / cpu if cpu else float("nan"),
        "statuses": dict(statuses),
        # Every alert had a fresh id: the receiver must have each once (warm-up included), no repeat.
        "correct": stats["duplicates"] == 0 and stats["received"] == alerts + warmup_alerts,
    }
    log.info("receiver ceiling: %s", result)
    return result


if __name__ == "__main__":  # a client process of ceiling(): spec in the environment, counts on stdout
    sys.stdout.write(json.dumps(_drive(json.loads(os.environ[SPEC_ENV]))) + "\n")
