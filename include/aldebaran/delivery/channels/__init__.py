"""Alert channels: one interface (:class:`Channel`), one module per kind, registered by name.

==============  ==============================================================================
module          what
==============  ==============================================================================
base            Channel, Outcome, the errors a send raises, the registry (``@register``)
connection      an Airflow connection in its JSON or URI form, typed accessors for the extras
sources         where the channel list and connections come from: Airflow in a task, else the env
config          the channel list + one connection per channel → channel objects
text            the machine body and its signature; the e-mail and SMS texts
http            one aiohttp session per channel on a private event loop; HTTP errors translated
webhook         ``webhook``  HTTP(S) POST, ``Idempotency-Key``, HMAC of timestamp + body; batches optional
smtp            ``email``    SMTP, ``Message-ID: <alert_id@aldebaran>``, a plain-text report
kafka           ``kafka``    another topic/cluster, key = alert_id, idempotent producer
sms             ``sms``      a Twilio-style provider API; cannot deduplicate; optional lookup
log             ``log``      JSON lines in a file (demos)
provider        what the provider channels share: a JSON POST, one reading of an HTTP status
alertmanager    ``alertmanager``  Prometheus Alertmanager's API; deduplicated by label set
pagerduty       ``pagerduty``  PagerDuty Events API v2, ``dedup_key`` = alert_id
opsgenie        ``opsgenie``  Opsgenie Alert API, ``alias`` = alert_id
push            ``fcm``, ``apns``  phone push (FCM HTTP v1, APNs HTTP/2); cannot deduplicate, collapse key = alert_id
==============  ==============================================================================

A kind is one module: a :class:`Channel` subclass with ``can_dedupe``, ``from_connection`` and
``send`` (and ``send_many`` / ``lookup`` where the provider offers better), decorated with
``@register("<kind>", conn_types=(...))``, imported below so that it registers.
"""

from aldebaran.delivery.channels.base import (
    CONN_TYPES,
    DEDUPE_MAX_RUN,
    KINDS,
    Channel,
    Outcome,
    OutcomeUnknown,
    PermanentError,
    Promise,
    RetryableError,
    register,
)
from aldebaran.delivery.channels.connection import (
    CONN_ID_PREFIX,
    ENV_PREFIX,
    NAME_PATTERN,
    SECRET_KEY_PATTERN,
    Connection,
    conn_env_var,
    conn_id,
)
from aldebaran.delivery.channels.http import USER_AGENT
from aldebaran.delivery.channels.text import (
    REPLAY_TOLERANCE_SECONDS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    alert_body,
    email_subject,
    email_text,
    signature,
    signed_headers,
    sms_text,
    timestamp_fresh,
    utc_iso,
    verify_signature,
)

# The built-in kinds register on import.
from aldebaran.delivery.channels.kafka import KafkaChannel  # noqa: I001
from aldebaran.delivery.channels.log import LogChannel
from aldebaran.delivery.channels.sms import E164, SmsChannel
from aldebaran.delivery.channels.smtp import EmailChannel
from aldebaran.delivery.channels.webhook import BATCH_HEADER, WebhookChannel, batch_key
from aldebaran.delivery.channels.alertmanager import AlertmanagerChannel
from aldebaran.delivery.channels.opsgenie import OpsgenieChannel
from aldebaran.delivery.channels.pagerduty import PagerDutyChannel
from aldebaran.delivery.channels.push import ApnsChannel, FcmChannel

from aldebaran.delivery.channels.config import (  # noqa: E402 (after the kinds it names)
    channel_from_connection,
    channel_names,
    configured_channels,
)
from aldebaran.delivery.channels.sources import CHANNELS_VARIABLE, env_connection, in_airflow_task

__all__ = [
    "AlertmanagerChannel", "ApnsChannel", "FcmChannel", "OpsgenieChannel", "PagerDutyChannel",
    "BATCH_HEADER", "CHANNELS_VARIABLE", "REPLAY_TOLERANCE_SECONDS", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "CONN_ID_PREFIX", "CONN_TYPES", "DEDUPE_MAX_RUN", "E164", "ENV_PREFIX",
    "KINDS", "NAME_PATTERN", "SECRET_KEY_PATTERN", "USER_AGENT", "Channel", "Connection", "EmailChannel", "KafkaChannel", "LogChannel",
    "Outcome", "OutcomeUnknown", "PermanentError", "Promise", "RetryableError", "SmsChannel", "WebhookChannel", "alert_body",
    "batch_key", "channel_from_connection", "channel_names", "conn_env_var", "conn_id", "configured_channels",
    "email_subject", "email_text", "env_connection", "in_airflow_task", "register", "signature", "signed_headers",
    "sms_text", "timestamp_fresh", "utc_iso", "verify_signature",
]
