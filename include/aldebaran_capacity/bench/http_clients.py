"""``aldebaran bench http-clients``: the webhook channel on aiohttp (what ships) against the same channel on
httpx, interleaved, to decide whether one HTTP client could serve every channel.

The product has two: aiohttp for the webhook, SMS and Alertmanager channels (one coroutine per run of
thousands of requests), httpx for APNs (HTTP/2, which aiohttp does not speak). Dropping aiohttp means httpx
must carry the webhook's ≥ 10k deliveries/s target at no more CPU; dropping httpx means an HTTP/2 path
for APNs, which aiohttp has not. This bench measures the first question on the real channel code:
:class:`~aldebaran.delivery.channels.webhook.WebhookChannel` builds, signs and posts every request, only
its transport differs (:class:`HttpxClient` stands in for :class:`~aldebaran.delivery.channels.http.HttpClient`
with the same interface and the same error translation's shape). The recipient is the capacity webhook
receiver in a process of its own (it verifies each signature and counts duplicates).

Each run sends `alerts` fresh alerts in runs of `run_size` (``send_many``, as the dispatcher hands a run
to a channel), for each client in turn, the order alternating; figures are deliveries/s (wall) and the
sender process's CPU-µs per delivery, medians of the runs with their spread, per batch size (1: one
POST per alert, the webhook's default, where the client's per-request cost shows; larger: alerts per
POST). Every run checks that the receiver got each alert once.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from aldebaran.delivery.channels.http import Response, target
from aldebaran.delivery.exceptions import OutcomeUnknown, RetryableError

log = logging.getLogger(__name__)

CLIENTS = ("aiohttp", "httpx")
BEGIN, END = "<!-- http-clients:begin -->", "<!-- http-clients:end -->"


class HttpxClient:
    """httpx's AsyncClient behind :class:`aldebaran.delivery.channels.http.HttpClient`'s interface (``run``,
    ``request``, ``close``): one loop thread, one pooled client of `limit` connections, HTTP/1.1."""

    def __init__(self, name: str, limit: int, verify: bool | str = True) -> None:
        self.name, self.limit, self.verify = name, limit, verify
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"httpx-{name}", daemon=True)
        self._thread.start()
        self._client = None

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def request(self, where: str, method: str, url: str, *, timeout: float, data: bytes | None = None,
                      headers: dict[str, str] | None = None, **_: Any) -> Response:
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(verify=self.verify, timeout=httpx.Timeout(timeout),
                                             limits=httpx.Limits(max_connections=self.limit,
                                                                 max_keepalive_connections=self.limit))
        try:
            resp = await self._client.request(method, url, content=data, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise RetryableError(f"{where} ({target(url)}): connection failed ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise OutcomeUnknown(f"{where} ({target(url)}): {type(exc).__name__}") from None
        return Response(resp.status_code, resp.headers, resp.content)

    def close(self) -> None:
        async def shutdown() -> None:
            if self._client is not None:
                await self._client.aclose()

        self.run(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def one_run(client: str, url: str, secret: str, alerts: int, batch: int, run_size: int,
            concurrency: int) -> dict:
    """`alerts` fresh alerts through a webhook channel on `client`; wall time, process CPU, outcomes."""
    from aldebaran.delivery.channels.webhook import WebhookChannel
    from aldebaran.model import Alert
    from aldebaran_capacity.bench.dispatch import make_alerts

    channel = WebhookChannel("benchhttp", url=url, secret=secret, verify=False, batch=batch,
                             concurrency=concurrency)
    if client == "httpx":
        channel._http.close()
        channel._http = HttpxClient("benchhttp", limit=concurrency, verify=False)
    items = [Alert.from_dict(a) for a in make_alerts(alerts, uuid.uuid4().hex[:8])]
    channel.send_many(items[:batch])  # connections up before the clock starts (the first run's TCP handshakes)
    items = items[batch:]
    cpu0, t0 = time.process_time(), time.perf_counter()
    delivered = 0
    try:
        for i in range(0, len(items), run_size):
            outcomes = channel.send_many(items[i:i + run_size])
            delivered += sum(1 for o in outcomes if o.status == "delivered")
    finally:
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        channel.close()
    return {"client": client, "batch": batch, "alerts": len(items), "delivered": delivered,
            "seconds": round(wall, 3), "deliveries_eps": round(len(items) / wall),
            "cpu_us_per_delivery": round(cpu * 1e6 / max(1, len(items)), 1)}


def run(alerts: int = 20_000, batches: tuple[int, ...] = (1, 100), repeats: int = 3, run_size: int = 2000,
        concurrency: int = 64) -> dict:
    from aldebaran_capacity.bench.boxstate import BoxSampler
    from aldebaran_capacity.receivers.process import ReceiverProcess

    runs: list[dict] = []
    box = BoxSampler()
    box.start()
    with ReceiverProcess("webhook") as rp:
        for r in range(repeats):
            for batch in batches:
                order = CLIENTS if r % 2 == 0 else CLIENTS[::-1]
                for client in order:
                    before = rp.stats()
                    res = one_run(client, rp.url, rp.secret, alerts, batch, run_size, concurrency)
                    after = rp.stats()
                    res["received"] = after["received"] - before["received"]
                    res["received_twice"] = after["duplicates"] - before["duplicates"]
                    # the warm-up's alerts are received too: every alert sent, once
                    res["correct"] = (res["delivered"] == res["alerts"] and res["received_twice"] == 0
                                      and res["received"] == res["alerts"] + batch)
                    res["run"] = r + 1
                    runs.append(res)
                    log.info("http-clients: run %d, %s, batch %d: %d deliveries/s, %.1f CPU-µs a delivery, "
                             "correct=%s", r + 1, client, batch, res["deliveries_eps"], res["cpu_us_per_delivery"],
                             res["correct"])
    box.stop()
    state = box.summary()
    return {"alerts": alerts, "repeats": repeats, "run_size": run_size, "concurrency": concurrency,
            "runs": runs, "summary": summarize(runs), "box": state}


def summarize(runs: list[dict]) -> dict:
    """batch → client → medians of the runs (deliveries/s with its spread, CPU-µs per delivery), and the
    httpx ÷ aiohttp ratios."""
    out: dict = {}
    for res in runs:
        out.setdefault(str(res["batch"]), {}).setdefault(res["client"], []).append(res)
    summary: dict = {}
    for batch, by_client in out.items():
        row = {}
        for client, rs in by_client.items():
            eps = [r["deliveries_eps"] for r in rs]
            row[client] = {"deliveries_eps": statistics.median(eps), "deliveries_eps_spread": [min(eps), max(eps)],
                           "cpu_us_per_delivery": statistics.median(r["cpu_us_per_delivery"] for r in rs),
                           "runs": len(rs), "correct": all(r["correct"] for r in rs)}
        if "aiohttp" in row and "httpx" in row:
            row["httpx_to_aiohttp"] = {
                "deliveries_eps": round(row["httpx"]["deliveries_eps"] / row["aiohttp"]["deliveries_eps"], 2),
                "cpu_us_per_delivery": round(row["httpx"]["cpu_us_per_delivery"]
                                             / row["aiohttp"]["cpu_us_per_delivery"], 2)}
        summary[batch] = row
    return summary


def render(result: dict) -> str:
    h, m = result["http_clients"], result["machine"]
    box = h.get("box") or {}
    lines = [BEGIN, "## One HTTP client or two: the webhook channel on aiohttp and on httpx", "",
             f"`{result['command']}` — {m['date']}, {m['cores']} cores; {h['alerts']:,} alerts a run in runs of "
             f"{h['run_size']:,} (`send_many`), {h['concurrency']} connections, the capacity webhook receiver in "
             f"its own process; {h['repeats']} runs, the clients alternating. Other processes "
             f"{box.get('other_cores_mean', '–')} core ({'quiet' if box.get('quiet') else 'NOT quiet'}). "
             "`aldebaran_capacity.bench.http_clients`.", "",
             "| alerts per POST | client | deliveries/s, median (spread) | CPU-µs a delivery | each once |",
             "|---:|---|---|---:|---|"]
    for batch, row in h["summary"].items():
        for client in CLIENTS:
            f = row.get(client)
            if f is None:
                continue
            lo, hi = f["deliveries_eps_spread"]
            lines.append(f"| {batch} | {client}{' (ships)' if client == 'aiohttp' else ''} | "
                         f"{f['deliveries_eps']:,.0f} ({lo:,.0f}–{hi:,.0f}) | {f['cpu_us_per_delivery']:.1f} | "
                         f"{'yes' if f['correct'] else 'NO'} |")
        if "httpx_to_aiohttp" in row:
            q = row["httpx_to_aiohttp"]
            lines.append(f"| {batch} | httpx ÷ aiohttp | {q['deliveries_eps']}× | {q['cpu_us_per_delivery']}× | |")
    lines += ["", END]
    return "\n".join(lines)


def main(args) -> int:
    import json

    from aldebaran.runtime import paths
    from aldebaran_capacity.bench import machine, sections

    batches = tuple(int(b) for b in args.batches.split(",")) if args.batches else (1, 100)
    result = {"machine": machine.describe(), "command": "aldebaran bench http-clients " + " ".join(sys.argv[3:]),
              "http_clients": run(args.alerts, batches, args.repeats)}
    print(json.dumps(result["http_clients"]["summary"], indent=1))
    if not all(r["correct"] for r in result["http_clients"]["runs"]):
        log.error("http-clients: a run lost or doubled alerts (see the runs above)")
    if args.report:
        sections.write_report(paths.ROOT / "docs", "http_clients", result, render(result), BEGIN, END)
    return 0 if all(r["correct"] for r in result["http_clients"]["runs"]) else 1
