"""`aldebaran chaos fuzz`, connection extras: hostile configuration through every channel kind's builder.

A channel is built from its connection (``AIRFLOW_CONN_ALDEBARAN_<NAME>``): aldebaran.storage.connections parses it,
aldebaran.delivery.channels.config.channel_from_connection picks the kind, the kind's ``from_connection``
reads its extras. Each input is a valid connection of one kind (the shapes of .env.example) whose ``extra``
is a structure-aware hostile variant (aldebaran_lab.chaos.fuzz_inputs), inline or as Airflow stores it
(a JSON string). Verdict: each builds a channel or raises ConfigError; anything else (OverflowError,
TypeError, KeyError...) is a crash. Nothing is sent: channels connect on first use.
"""

from __future__ import annotations

import json
import time

from aldebaran_lab.chaos.fuzz_inputs import draw, hostile_documents
from aldebaran_lab.chaos.fuzz_store import Tally

# One valid connection per built-in kind, without its extra (then the extra the kind reads).
CONNECTIONS = {
    "webhook": ({"conn_type": "http", "host": "hooks.example.com", "schema": "https", "password": "s"},
                {"endpoint": "/aldebaran/alerts", "timeout": 10, "batch": 200, "concurrency": 16, "fast": True}),
    "email": ({"conn_type": "smtp", "host": "smtp.example.com", "port": 587, "login": "a@example.com", "password": "p"},
              {"from_email": "a@example.com", "to": ["ops@example.com"], "disable_ssl": True}),
    "kafka": ({"conn_type": "kafka"},
              {"topic": "alerts.forwarded", "bootstrap.servers": "bus-1.example.com:9092", "flush_timeout": 10}),
    "sms": ({"conn_type": "sms", "host": "https://api.twilio.com", "login": "AC1", "password": "t"},
            {"from": "+15550001111", "to": "+15552223333", "lookup": True}),
    "log": ({"conn_type": "log"}, {"path": "alerts.log.jsonl"}),
    "alertmanager": ({"conn_type": "alertmanager", "host": "http://127.0.0.1:9093"}, {"labels": {"severity": "page"}}),
    "pagerduty": ({"conn_type": "pagerduty", "password": "k"}, {"severity": "critical"}),
    "opsgenie": ({"conn_type": "opsgenie", "password": "k"}, {"priority": "P2", "tags": ["aldebaran"]}),
    "fcm": ({"conn_type": "fcm", "password": json.dumps({"project_id": "p", "client_email": "a@b.c",
                                                          "private_key": "-----BEGIN PRIVATE KEY-----\n",
                                                          "token_uri": "https://oauth2.example.com/token"})},
            {"topic": "oncall"}),
    "apns": ({"conn_type": "apns", "login": "K1", "password": "-----BEGIN PRIVATE KEY-----\n"},
             {"team_id": "T1", "topic": "com.example.oncall", "device_token": "ab" * 32}),
}


def build(kind: str, extra: bytes, as_string: bool):
    """The channel `kind` from its connection with `extra` (raw JSON bytes), as a process builds it."""
    from aldebaran.delivery.channels.config import channel_from_connection
    from aldebaran.delivery.channels.connection import Connection

    fields, _ = CONNECTIONS[kind]
    text = extra.decode("utf-8", "replace")
    # Airflow keeps the extra as a JSON string; the env var's JSON form may hold it inline.
    raw = json.dumps({**fields, "extra": text}) if as_string else json.dumps({**fields, "extra": 0})[:-2] + text + "}"
    conn = Connection.parse(f"AIRFLOW_CONN_ALDEBARAN_{kind.upper()}", raw)
    return channel_from_connection(kind, conn)


def run_extras(inputs: int = 10_000, seed: int = 11) -> dict:
    """`inputs` hostile extras per channel kind."""
    from aldebaran.exceptions import ConfigError

    out = {}
    for i, (kind, (_, extra)) in enumerate(sorted(CONNECTIONS.items())):
        t0 = time.monotonic()
        bodies, _ = draw(hostile_documents(extra), inputs, seed=seed + i)
        tally = Tally(kind)
        for n, body in enumerate(bodies):
            try:
                channel = build(kind, body, as_string=n % 2 == 1)
            except ConfigError:
                tally.add("reported")
                continue
            except Exception as exc:  # noqa: BLE001 - a crash is the finding
                tally.add("crashes", body, exc)
                continue
            tally.add("accepted")
            channel.close()
        out[kind] = {**tally.result(), "seconds": round(time.monotonic() - t0, 1)}
    return out


def failures(extras: dict, inputs: int) -> list[str]:
    return [f"extras {kind}: {r['crashes']} crash(es): {r['crash_examples']}" for kind, r in extras.items()
            if r["crashes"]] + [f"extras {kind}: {r['inputs']} inputs of {inputs}" for kind, r in extras.items()
                                if r["inputs"] < inputs]
