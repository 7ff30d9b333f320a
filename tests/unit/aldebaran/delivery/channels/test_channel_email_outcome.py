"""The e-mail channel's outcome when the SMTP session fails part-way, against a failure-injecting fake
SMTP server (a socket thread on 127.0.0.1 that speaks just enough SMTP and fails where it is told):
once the DATA command has gone out the server may hold the message, so a lost reply is an unknown
outcome (OutcomeUnknown, status "unknown"); before it, a plain retry; after the server's 250, delivered."""

from __future__ import annotations

import socket
import threading

import pytest

from aldebaran.delivery.channels import EmailChannel, OutcomeUnknown, RetryableError
from aldebaran.model import Alert

ALERT = Alert.from_dict({"alert_id": "5f0c6c3f9b8a4e0e9f1d2c3b4a596877", "kind": "OVERFILL", "order_id": "1",
                         "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120})


class FailureInjectingSmtpServer:
    """A fake SMTP server for one test. `fail` says where it fails:

    - ``drop_after_body``: reads the whole message (to the final ``.``), then closes without a reply;
    - ``silent_after_body``: reads the whole message, then never answers (the client times out);
    - ``drop_at_mail``: closes when MAIL FROM arrives (before DATA);
    - ``reject_body``: answers the message with 451 (a reply: the server did not take it);
    - ``drop_at_quit``: answers the message with 250, then closes when QUIT arrives;
    - ``none``: a well-behaved server.

    `bodies` holds every message body it read to the end."""

    def __init__(self, fail: str) -> None:
        self.fail = fail
        self.bodies: list[bytes] = []
        self.commands: list[str] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._sock.settimeout(5)
        try:
            conn, _ = self._sock.accept()
        except OSError:
            return
        with conn:
            self._session(conn, conn.makefile("rb"))

    def _session(self, conn: socket.socket, reader) -> None:
        conn.sendall(b"220 fake ESMTP\r\n")
        while True:
            line = reader.readline()
            if not line:
                return
            verb = line.decode().strip().split(" ", 1)[0].split(":", 1)[0].upper()
            self.commands.append(verb)
            if verb == "EHLO":
                conn.sendall(b"250-fake\r\n250 8BITMIME\r\n")
            elif verb == "MAIL" and self.fail == "drop_at_mail":
                return
            elif verb in ("MAIL", "RCPT", "RSET", "NOOP"):
                conn.sendall(b"250 ok\r\n")
            elif verb == "DATA":
                conn.sendall(b"354 go ahead\r\n")
                body = b"".join(iter(lambda: reader.readline(), b".\r\n"))
                self.bodies.append(body)
                if self.fail == "drop_after_body":
                    return
                if self.fail == "silent_after_body":
                    self._stop.wait(10)
                    return
                conn.sendall(b"451 try later\r\n" if self.fail == "reject_body" else b"250 queued as X1\r\n")
            elif verb == "QUIT":
                if self.fail != "drop_at_quit":
                    conn.sendall(b"221 bye\r\n")
                return
            else:
                conn.sendall(b"502 not here\r\n")

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(5)


@pytest.fixture
def smtp_server(request):
    servers = []

    def start(fail: str) -> FailureInjectingSmtpServer:
        servers.append(FailureInjectingSmtpServer(fail))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def channel(port: int, timeout: float = 0.5) -> EmailChannel:
    return EmailChannel("mail", "127.0.0.1", "aldebaran@example.com", ["ops@example.com"], port=port,
                        use_ssl=False, starttls=False, timeout=timeout)


@pytest.mark.parametrize("fail", ["drop_after_body", "silent_after_body"])
def test_a_lost_reply_after_data_is_an_unknown_outcome(smtp_server, fail):
    server = smtp_server(fail)
    with pytest.raises(OutcomeUnknown, match="after DATA, the server may have accepted the message"):
        channel(server.port).send(ALERT, ALERT.alert_id)
    assert len(server.bodies) == 1 and ALERT.alert_id.encode() in server.bodies[0]  # it did get the message


def test_send_many_reports_the_lost_reply_as_unknown(smtp_server):
    server = smtp_server("drop_after_body")
    (outcome,) = channel(server.port).send_many([ALERT])
    assert (outcome.alert_id, outcome.status) == (ALERT.alert_id, "unknown")


def test_a_drop_before_data_stays_a_plain_retry(smtp_server):
    server = smtp_server("drop_at_mail")
    with pytest.raises(RetryableError) as exc:
        channel(server.port).send(ALERT, ALERT.alert_id)
    assert not isinstance(exc.value, OutcomeUnknown) and server.bodies == []
    assert "DATA" not in server.commands


def test_a_refusal_of_the_message_is_a_retry_not_a_doubt(smtp_server):
    server = smtp_server("reject_body")
    with pytest.raises(RetryableError, match="SMTP 451") as exc:
        channel(server.port).send(ALERT, ALERT.alert_id)
    assert not isinstance(exc.value, OutcomeUnknown)


@pytest.mark.parametrize("fail", ["drop_at_quit", "none"])
def test_a_message_the_server_took_is_delivered_whatever_quit_does(smtp_server, fail):
    server = smtp_server(fail)
    receipt = channel(server.port).send(ALERT, ALERT.alert_id)
    assert receipt["message_id"] == f"<{ALERT.alert_id}@aldebaran>" and len(server.bodies) == 1
    assert server.commands[-1] == "QUIT"
