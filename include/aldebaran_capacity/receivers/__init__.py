"""Real local receivers for the delivery channels: tests, demos and benchmarks (not for production).

Each listens on 127.0.0.1 with an ephemeral port in a background thread, has start()/stop() and is a
context manager, records what it received and counts repeats, so a test can assert "exactly once":

- :class:`WebhookReceiver` (:mod:`.webhook`): HTTP(S) endpoint that verifies ``X-Aldebaran-Signature``
  over ``X-Aldebaran-Timestamp`` and the body (401 if wrong, or if the timestamp is older than 5 minutes); one alert per POST, deduplicated by ``Idempotency-Key`` (201, then 409), or a batch
  (``X-Aldebaran-Batch: <n>``, ``{"alerts": [...]}``) deduplicated per alert id (200 with the duplicates).
- :class:`SmsProvider` (:mod:`.sms`): a Twilio-style Messages API (basic auth, form POST, JSON ``sid``)
  counting sends per (recipient, text) and per ``Reference``, with a lookup ``GET ?Reference=<ref>``.
- :class:`SmtpRecorder` (:mod:`.smtp`): an aiosmtpd SMTP server (optional STARTTLS and AUTH) recording
  each message with its Message-ID.
- :class:`FakePagerDuty` (:mod:`.pagerduty`), :class:`FakeOpsgenie` (:mod:`.opsgenie`): the providers'
  published create-event contracts (their keys and payload checks, deduplication by ``dedup_key`` /
  ``alias`` while an alert is open, 429 with ``Retry-After`` over a rate); `opened` counts alerts per key.
- :class:`FakeFcm` (:mod:`.fcm`): FCM HTTP v1 with its OAuth 2 token endpoint (a service-account key it
  hands out); :class:`FakeApns` (:mod:`.apns`): APNs' provider API over HTTP/2 and TLS with ES256
  provider tokens. Neither deduplicates (as the real ones): repeats are counted per collapse key.
- :class:`AlertmanagerProcess` (:mod:`.alertmanager`): not a fake, the real Alertmanager binary `make setup`
  builds, in a child process, read back through its API.

The HTTP receivers run on aiohttp (:mod:`.base`): the dispatch target is ≥ 10k deliveries/s per webhook
channel, so the receiver must not be what a benchmark measures (``aldebaran_capacity.bench.receiver_ceiling``
measures its ceiling). Each records the first receipt time per alert id (`received_at`) and the
repeats, and answers ``GET /_stats``. For a benchmark, :class:`ReceiverProcess` runs one in a process
of its own (``python -m aldebaran_capacity.receivers serve ...``, see :mod:`.process`).

Failure injection is explicit in the method names: ``fail_next(n, status)``, ``delay_next(n, seconds)``
and ``down()`` (a context manager: the port refuses connections and open connections are dropped
until the block ends).
"""

from aldebaran_capacity.receivers.alertmanager import AlertmanagerProcess
from aldebaran_capacity.receivers.apns import FakeApns
from aldebaran_capacity.receivers.base import LOCALHOST, HttpReceiver, self_signed_cert
from aldebaran_capacity.receivers.fcm import FakeFcm
from aldebaran_capacity.receivers.opsgenie import FakeOpsgenie
from aldebaran_capacity.receivers.pagerduty import FakePagerDuty
from aldebaran_capacity.receivers.process import ReceiverProcess, serve
from aldebaran_capacity.receivers.sms import SmsMessage, SmsProvider
from aldebaran_capacity.receivers.smtp import ReceivedMail, SmtpRecorder
from aldebaran_capacity.receivers.webhook import BATCH_HEADER, WebhookDelivery, WebhookReceiver

__all__ = [
    "AlertmanagerProcess", "FakeApns", "FakeFcm", "FakeOpsgenie", "FakePagerDuty",
    "BATCH_HEADER", "LOCALHOST", "HttpReceiver", "ReceivedMail", "ReceiverProcess", "SmsMessage", "SmsProvider",
    "SmtpRecorder", "WebhookDelivery", "WebhookReceiver", "self_signed_cert", "serve",
]
