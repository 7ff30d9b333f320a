"""A receiver in a process of its own, for benchmarks: it does not share the GIL with the sender.

Command line (the secrets come from environment variables, never argv, which ``ps`` shows)::

    ALDEBARAN_RECEIVER_SECRET=... python -m aldebaran_capacity.receivers serve --kind webhook --port 8701 \\
        --secret-env ALDEBARAN_RECEIVER_SECRET
    ALDEBARAN_RECEIVER_TOKEN=... python -m aldebaran_capacity.receivers serve --kind sms --port 8702 \\
        --account-sid AC... --auth-token-env ALDEBARAN_RECEIVER_TOKEN

Once listening it writes one JSON line to stdout, ``{"kind", "url", "pid"}`` (+ ``"path"``: the SMS
Messages path; with ``--port 0`` the only way to learn the port) and serves until SIGTERM or SIGINT.
``GET <url>/_stats`` answers ``{"received", "duplicates", "requests", "incomplete_requests",
"received_at": {alert id: epoch s}, "repeats": {alert id: n}}``; ``GET <url>/_stats?summary=1`` leaves
out `received_at` and `repeats`.
From Python, :class:`ReceiverProcess` does all of this:
``with ReceiverProcess("webhook", secret=s) as rp: ... rp.stats()``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import secrets
import selectors
import signal
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Literal

from aldebaran.runtime import logs
from aldebaran_capacity.receivers.base import LOCALHOST, STATS_PATH, HttpReceiver
from aldebaran_capacity.receivers.sms import SmsProvider
from aldebaran_capacity.receivers.webhook import WebhookReceiver

log = logging.getLogger(__name__)

Kind = Literal["webhook", "sms"]
KINDS: tuple[Kind, ...] = ("webhook", "sms")
SECRET_ENV = "ALDEBARAN_RECEIVER_SECRET"
TOKEN_ENV = "ALDEBARAN_RECEIVER_TOKEN"


def build(kind: Kind, *, host: str = LOCALHOST, port: int = 0, secret: str | None = None,
          account_sid: str | None = None, auth_token: str | None = None,
          tls: tuple[str | Path, str | Path] | None = None) -> HttpReceiver:
    """The receiver of `kind`, not started."""
    if kind == "webhook":
        if not secret:
            raise ValueError("a webhook receiver needs the shared secret (--secret-env)")
        return WebhookReceiver(secret, host=host, port=port, tls=tls)
    if kind == "sms":
        if tls:
            raise ValueError("the SMS provider serves plain HTTP only")
        return SmsProvider(account_sid, auth_token, host=host, port=port)
    raise ValueError(f"unknown receiver kind {kind!r}: one of {', '.join(KINDS)}")


def serve(kind: Kind, **kwargs) -> None:
    """Run one receiver (arguments as :func:`build`) until SIGTERM or SIGINT; announce it on stdout."""
    run(build(kind, **kwargs))


def run(receiver: HttpReceiver) -> None:
    """Serve `receiver` until SIGTERM or SIGINT; announce it on stdout."""
    kind = "webhook" if isinstance(receiver, WebhookReceiver) else "sms"
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    # Blocked before the receiver's thread starts, so that thread inherits the mask and the signals
    # wait for sigwait() here.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    # The request path leaves no cyclic garbage (a run of thousands of requests with the collector off
    # leaves ~10 unreachable objects), while everything it records stays alive and would be rescanned
    # by every collection, 10-20 % of the receiver's CPU. In its own process: collector off.
    gc.freeze()
    gc.disable()
    with receiver:
        announcement = {"kind": kind, "url": receiver.url, "pid": os.getpid()}
        if isinstance(receiver, SmsProvider):
            announcement["path"] = receiver.path
        sys.stdout.write(json.dumps(announcement) + "\n")
        sys.stdout.flush()
        got = signal.sigwait(stop_signals)
        log.info("%s receiver on %s: %s, stopping (%s)", kind, receiver.url, signal.Signals(got).name,
                 receiver.stats(summary=True))


class ReceiverProcess:
    """A receiver started as ``python -m aldebaran_capacity.receivers serve`` in a child process; a context
    manager. Secrets default to fresh random ones; `url`, `pid` and :meth:`stats` once started."""

    def __init__(self, kind: Kind, *, secret: str | None = None, account_sid: str | None = None,
                 auth_token: str | None = None, host: str = LOCALHOST, port: int = 0,
                 tls: tuple[str | Path, str | Path] | None = None, startup_timeout: float = 30.0) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown receiver kind {kind!r}: one of {', '.join(KINDS)}")
        self.kind = kind
        self.secret = secret or secrets.token_urlsafe(24)
        self.account_sid = account_sid or "AC" + secrets.token_hex(16)
        self.auth_token = auth_token or secrets.token_urlsafe(24)
        self.host, self.port, self.tls = host, port, tls
        self.startup_timeout = startup_timeout
        self.url: str | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def path(self) -> str:
        """The SMS provider's Messages path (as :attr:`SmsProvider.path`)."""
        return f"/2010-04-01/Accounts/{self.account_sid}/Messages.json"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> "ReceiverProcess":
        args = [sys.executable, "-m", "aldebaran_capacity.receivers", "serve", "--kind", self.kind,
                "--host", self.host, "--port", str(self.port)]
        env = dict(os.environ)
        if self.kind == "webhook":
            env[SECRET_ENV] = self.secret
            args += ["--secret-env", SECRET_ENV]
        else:
            env[TOKEN_ENV] = self.auth_token
            args += ["--account-sid", self.account_sid, "--auth-token-env", TOKEN_ENV]
        if self.tls:
            args += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, env=env, text=True)
        line = self._first_line()
        if not line:
            code = self._proc.poll()
            self.stop()
            raise RuntimeError(f"{self.kind} receiver process did not announce itself within "
                               f"{self.startup_timeout}s (exit code {code}; its stderr is above)")
        self.url = json.loads(line)["url"]
        return self

    def _first_line(self) -> str:
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            if not sel.select(self.startup_timeout):
                return ""
        return self._proc.stdout.readline()

    def stats(self, summary: bool = True) -> dict:
        """The receiver's ``GET /_stats`` (with `received_at` unless `summary`)."""
        ctx = ssl.create_default_context(cafile=str(self.tls[0])) if self.tls else None
        url = self.url + STATS_PATH + ("?summary=1" if summary else "")
        with urllib.request.urlopen(url, timeout=60, context=ctx) as resp:
            return json.load(resp)

    def stop(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("%s receiver process %d ignored SIGTERM; killing it", self.kind, proc.pid)
                proc.kill()
                proc.wait(timeout=10)
        proc.stdout.close()

    def __enter__(self) -> "ReceiverProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _secret_from(var: str | None, what: str) -> str | None:
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise SystemExit(f"{what}: environment variable {var} is not set")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aldebaran_capacity.receivers",
                                     description="Run a local test receiver in this process (a capacity-test tool).")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="serve one receiver until SIGTERM/SIGINT; announces its URL on stdout")
    p.add_argument("--kind", choices=KINDS, required=True)
    p.add_argument("--host", default=LOCALHOST)
    p.add_argument("--port", type=int, default=0, help="0: an ephemeral port (read it from the announcement)")
    p.add_argument("--secret-env", metavar="VAR", help="webhook: env var holding the HMAC secret")
    p.add_argument("--account-sid", help="sms: the account SID (default: a random one)")
    p.add_argument("--auth-token-env", metavar="VAR", help="sms: env var holding the auth token")
    p.add_argument("--tls-cert", type=Path, help="webhook: serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", type=Path, help="webhook: its private key (PEM)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logs.setup("receiver", verbose=args.verbose)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.kind == "sms" and not args.auth_token_env:
        parser.error("an SMS provider needs its auth token (--auth-token-env)")
    try:
        receiver = build(args.kind, host=args.host, port=args.port,
                         secret=_secret_from(args.secret_env, "--secret-env"), account_sid=args.account_sid,
                         auth_token=_secret_from(args.auth_token_env, "--auth-token-env"),
                         tls=(args.tls_cert, args.tls_key) if args.tls_cert else None)
    except ValueError as exc:
        parser.error(str(exc))
    run(receiver)
