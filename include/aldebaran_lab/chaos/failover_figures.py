"""The dispatch-failover campaign's figures (aldebaran_lab.chaos.dispatch_failover): who owns which partition
(the ledger's owner objects), a kill's figures from the recipients' receipts, and the campaign's details and
table. Pure: tests/unit/aldebaran_lab/chaos/test_dispatch_failover.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from aldebaran_lab.chaos.common import longest_pause, recovery_text


@dataclass(frozen=True)
class Owner:
    """A partition's owner object in the ledger (``Ledger.take_partition``)."""

    owner: str
    epoch: int
    since: float  # when it was taken (the dispatcher's clock, epoch seconds)


Owners = Mapping[str, Mapping[int, "Owner | None"]]  # channel → partition → owner


def split_between(owners: Owners, a: str, b: str) -> bool:
    """Each channel's partitions are all owned by `a` or `b`, and each of the two owns at least one."""
    for parts in owners.values():
        who = [o.owner if o else None for o in parts.values()]
        if any(w not in (a, b) for w in who) or a not in who or b not in who:
            return False
    return True


def owned_by(owners: Owners, owner: str) -> dict[str, set[int]]:
    return {ch: {p for p, o in parts.items() if o and o.owner == owner} for ch, parts in owners.items()}


def takeover_figures(received_at: Mapping[str, float], partition_of: Mapping[str, int], dead: Iterable[int],
                     killed_at: float, taken_at: Mapping[int, float]) -> dict:
    """One channel's figures for one kill, in seconds from `killed_at` (epoch seconds, the dead one gone):
    `taken_s` (the survivor owns every dead partition: the last owner epoch taken), `first_s` (the first
    alert of a dead partition received after its new owner took it), `all_s` (every dead partition has
    delivered again), `gap_s` (the longest stretch without any receipt at the recipient, all partitions,
    from the kill until `all_s`). `received_at`: first receipt per alert id; `taken_at`: dead partition →
    when the survivor took it. A figure that did not happen is None. Receipts of a dead partition between
    the kill and its take can only come from the dead one (in flight at the kill): `stragglers`."""
    dead = set(dead)
    firsts: dict[int, float] = {}
    stragglers = 0
    for alert_id, t in received_at.items():
        p = partition_of.get(alert_id)
        if p not in dead or t < killed_at:
            continue
        if p not in taken_at or t < taken_at[p]:
            stragglers += 1
        elif t < firsts.get(p, math.inf):
            firsts[p] = t

    def since(t: float | None) -> float | None:
        return None if t is None else round(t - killed_at, 2)

    every = max(firsts.values()) if dead and len(firsts) == len(dead) else None
    end = every if every is not None else max(firsts.values(), default=None)
    return {
        "taken_s": since(max(taken_at[p] for p in dead)) if dead and dead <= taken_at.keys() else None,
        "first_s": since(min(firsts.values(), default=None)),
        "all_s": since(every),
        "gap_s": longest_pause(received_at.values(), killed_at, end)[0] if end is not None else None,
        "stragglers": stragglers,
    }


def summary(values: Iterable[float | None]) -> str:
    """recovery_text of the figures that happened, and how many did not."""
    values = list(values)
    got = [v for v in values if v is not None]
    missing = len(values) - len(got)
    return recovery_text(got) + (f", {missing} never" if missing else "")


def epochs(owners: Owners) -> tuple:
    """Every (channel, partition, owner epoch): unchanged over a while = no rebalance under way."""
    return tuple((ch, p, o.epoch if o else 0) for ch, parts in sorted(owners.items()) for p, o in sorted(parts.items()))


def details(events: list[dict], received: dict, partition_of: dict, wall0: float, timeouts_ms: list[int],
            stalls_s: list[float], channels: Sequence[str]) -> dict:
    """The campaign's details: per session timeout, each kill's figures per channel (from the receipts) and each
    freeze's outcome, and their summaries."""
    per_timeout: dict[int, dict] = {}
    for e in events:
        s = per_timeout.setdefault(e["timeout_ms"], {"kills": [], "stalls": []})
        if e["kind"] == "kill":
            figures = {ch: takeover_figures(received[ch], partition_of, e["dead"][ch], e["killed_at"], e["taken_at"][ch])
                       for ch in channels}
            s["kills"].append({"dispatcher": e["dispatcher"], "at_s": round(e["killed_at"] - wall0, 1),
                               "dead_partitions": e["dead"], "runs_stored": e["runs_stored"],
                               "runs_stored_dead": e["runs_stored_dead"], **figures})
        else:
            end = e["resumed_at"] + e["split_again_s"]
            gaps = {ch: longest_pause(received[ch].values(), e["frozen_at"], end)[0] for ch in channels}
            s["stalls"].append({"stall_s": e["stall_s"], "dispatcher": e["dispatcher"],
                                "taken_while_frozen": e["taken_while_frozen"],
                                "false_failover": e["false_failover"], "split_again_s": e["split_again_s"],
                                "longest_gap_s": gaps})
    out = {}
    for t in timeouts_ms:
        s = per_timeout.get(t, {"kills": [], "stalls": []})
        out[str(t)] = {
            **{f"{what} ({ch})": summary(k[ch][key] for k in s["kills"])
               for ch in channels for what, key in (("kill → survivor owns the partitions", "taken_s"),
                                                     ("kill → first receipt from them", "first_s"),
                                                     ("kill → all of them delivering", "all_s"),
                                                     ("longest gap at the recipient", "gap_s"))},
            "stalls": {f"{st['stall_s']:g} s": "false failover (expelled, rebalanced)" if st["false_failover"] else "no failover"
                       for st in s["stalls"]},
            "kills": s["kills"], "stall_events": s["stalls"],
        }
    return {"timeouts_ms": timeouts_ms, "stalls_s": stalls_s, "per_timeout_ms": out}


def rows(details: dict, lost: dict, duplicated: dict, starts: int, channels: Sequence[str],
         resent: dict | None = None) -> list[dict]:
    """The results table: per session timeout and channel the failover figures, then the verdict per recipient
    (`resent`: its same-key resends, chaos.receipts)."""
    rows = []
    for t, s in details["per_timeout_ms"].items():
        n = len(s["kills"])
        stalls = "; ".join(f"{k} freeze: {v}" for k, v in s["stalls"].items())
        for ch in channels:
            rows.append({"scenario": f"session {int(t) / 1000:g} s, SIGKILL without restart — {ch}", "runs": starts,
                         "faults": n, "lost": "(below)", "duplicated": "(below)", "resent_same_key": "(below)",
                         "recovery": f"kill → first receipt from the dead one's partitions {s[f'kill → first receipt from them ({ch})']}; "
                                     f"longest gap at the recipient {s[f'longest gap at the recipient ({ch})']}"
                                     + (f"; {stalls}" if stalls and ch == channels[0] else "")})
    for ch, label in (("webhook", "webhook (idempotent), whole run"), ("bus", "Kafka bus (key = alert id), whole run")):
        rows.append({"scenario": label, "runs": starts, "faults": sum(len(s["kills"]) + len(s["stall_events"])
                                                                      for s in details["per_timeout_ms"].values()),
                     "lost": lost[ch], "duplicated": duplicated[ch], "resent_same_key": (resent or {}).get(ch),
                     "recovery": f"all settled {details['settled_after_s']} s after the last fault"})
    return rows
