"""How the product reaches the object store: the Airflow AWS connection ``aldebaran_s3`` (its id is
ALDEBARAN_S3_CONNECTION, e.g. ``aws_default``), else the ALDEBARAN_S3_* settings; the boto3 session and
the Spark s3a settings (:func:`s3a_conf`) both come from the one :class:`S3Access` resolved here.

The connection has the Amazon provider's shape (conn type ``aws``): login = access key id, password =
secret access key, extra ``endpoint_url`` (MinIO or any S3-compatible server; none: AWS S3),
``region_name``, ``aws_session_token``, ``role_arn`` with ``assume_role_kwargs`` (e.g. ``ExternalId``,
``RoleSessionName``, ``DurationSeconds``), ``service_config.sts.endpoint_url`` (where AssumeRole is
called: MinIO's own endpoint on-prem; none: AWS STS) and ``verify``. The bucket is not part of it: it is
ALDEBARAN_S3_BUCKET (where the platform's data lives, not how to reach it), so one connection such
as ``aws_default`` can serve several deployments.

Precedence (:func:`resolve`):

1. inside an Airflow task: the connection as Airflow resolves it (UI/API, ``AIRFLOW_CONN_*``, secrets
   backend), read by the Amazon provider's ``AwsConnectionWrapper``;
2. outside Airflow (the auditor under spark-submit, the streaming dispatchers, the CLI):
   ``AIRFLOW_CONN_ALDEBARAN_S3``, which a task sets for the processes it starts
   (aldebaran.storage.connections.connections_env), read here in the same shape without importing Airflow;
3. no such connection: ALDEBARAN_S3_* (endpoint, region, keys, session token, role).

A connection is used whole: a field it lacks is not taken from ALDEBARAN_S3_* (no ``endpoint_url`` means
AWS S3). Credentials are used as boto3 uses them: the keys (and session token) when given, else the AWS
default credential chain (environment, shared config, web identity = EKS IRSA, container or instance
profile); with ``role_arn`` those are the source of an STS AssumeRole whose credentials botocore
refreshes before they expire, as the provider's session factory does.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from aldebaran.storage import connections
from aldebaran.storage.connections import Connection
from aldebaran.exceptions import ConfigError
from aldebaran.settings import ObjectStoreSettings, load

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"
ROLE_SESSION_NAME = "aldebaran"
# What this module reads from assume_role_kwargs (the provider passes any AssumeRole argument through).
ROLE_KWARGS = ("RoleSessionName", "ExternalId", "DurationSeconds")


@dataclass(frozen=True)
class S3Access:
    """Where the object store is and which credentials reach it; `source` names where it came from
    (the Airflow connection, the env var or ALDEBARAN_S3_*), for errors."""

    source: str
    endpoint_url: str | None = None
    region: str = DEFAULT_REGION
    access_key: str | None = None
    secret_key: SecretStr | None = field(default=None, repr=False)
    session_token: SecretStr | None = field(default=None, repr=False)
    role_arn: str | None = None
    role_kwargs: dict[str, Any] = field(default_factory=dict)
    sts_endpoint_url: str | None = None
    verify: bool | str | None = None

    @property
    def credentials(self) -> str:
        """``role`` (AssumeRole), ``session`` (keys + token), ``keys`` or ``default`` (the AWS chain)."""
        if self.role_arn:
            return "role"
        if self.access_key:
            return "session" if self.session_token else "keys"
        return "default"

    @property
    def role_session_name(self) -> str:
        return str(self.role_kwargs.get("RoleSessionName") or ROLE_SESSION_NAME)

    def describe(self) -> str:
        """For logs and errors: where from, which endpoint, which kind of credentials; never a secret."""
        return f"{self.source} ({self.endpoint_url or 'AWS S3'}, {self.credentials} credentials)"


def resolve(settings: ObjectStoreSettings | None = None) -> S3Access:
    """The object store's access from wherever this process runs (module docstring)."""
    settings = settings or load(ObjectStoreSettings)
    conn = connections.lookup(settings.connection) if settings.connection else None
    if conn is None:
        return from_settings(settings)
    access = from_provider(conn, settings.connection) if connections.in_airflow_task() else from_connection(conn)
    log.debug("object store through %s", access.describe())
    return access


def connection_env(settings: ObjectStoreSettings | None = None) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` of the object store's connection, if one is defined where this process looks:
    what a task gives the processes it starts (the auditor, the dispatchers, the lane), which read only
    their environment. Holds secrets: for a child's environment, never for a log."""
    settings = settings or load(ObjectStoreSettings)
    return connections.connections_env([settings.connection]) if settings.connection else {}


def connection_of(s: ObjectStoreSettings) -> dict[str, Any]:
    """ALDEBARAN_S3_* as the equivalent AWS connection (Airflow's JSON form; holds the secret key): how
    the local services define ``aldebaran_s3`` for their MinIO."""
    extra = {"endpoint_url": s.endpoint(), "region_name": s.region, "role_arn": s.role_arn or None,
             "aws_session_token": s.session_token.get_secret_value() if s.session_token else None}
    return {"conn_type": "aws", **({"login": s.access_key.get_secret_value()} if s.access_key else {}),
            **({"password": s.secret_key.get_secret_value()} if s.secret_key else {}),
            "extra": {k: v for k, v in extra.items() if v}}


def from_settings(s: ObjectStoreSettings) -> S3Access:
    """ALDEBARAN_S3_*: the fallback when no connection is defined."""
    return S3Access(
        source=f"ALDEBARAN_S3_* (no connection {s.connection!r})" if s.connection else "ALDEBARAN_S3_*",
        endpoint_url=s.endpoint(), region=s.region,
        access_key=s.access_key.get_secret_value() if s.access_key else None,
        secret_key=s.secret_key, session_token=s.session_token, role_arn=s.role_arn or None)


def _check_type(conn: Connection) -> None:
    if conn.conn_type not in (None, "aws"):
        raise conn.error("field conn_type", f"must be aws (an Amazon Web Services connection), got {conn.conn_type!r}")


def from_connection(conn: Connection) -> S3Access:
    """An AWS connection read as the provider reads it, without Airflow (outside Airflow)."""
    _check_type(conn)
    extra = conn.extra
    unsupported = sorted(k for k in ("profile_name", "s3_config_file") if extra.get(k))
    if unsupported:
        raise conn.error(f"field extra.{unsupported[0]}", "is not supported here: use keys, a role_arn or the AWS "
                         "default credential chain (AWS_PROFILE, instance profile, IRSA)")
    method = conn.extra_str("assume_role_method", "assume_role")
    if method != "assume_role":
        raise conn.error("field extra.assume_role_method", f"{method!r} is not supported (only assume_role)")
    # The provider takes the keys from login/password, else from extra aws_access_key_id/aws_secret_access_key.
    key = conn.login or conn.extra_str("aws_access_key_id")
    secret = conn.password.get_secret_value() if conn.password else conn.extra_str("aws_secret_access_key")
    return _access(conn, key, secret, conn.extra_str("aws_session_token"), conn.extra_str("region_name"),
                   _service(conn, "s3") or conn.extra_str("endpoint_url"), conn.extra_str("role_arn"),
                   extra.get("assume_role_kwargs") or {}, _service(conn, "sts"), extra.get("verify"))


def from_provider(conn: Connection, conn_id: str) -> S3Access:
    """Airflow connection `conn_id` read by the Amazon provider's ``AwsConnectionWrapper`` (inside an
    Airflow task, where Airflow is loaded anyway)."""
    _check_type(conn)
    from airflow.providers.amazon.aws.utils.connection_wrapper import AwsConnectionWrapper

    wrapper = AwsConnectionWrapper.from_connection_metadata(
        conn_id=conn_id, login=conn.login, password=conn.password.get_secret_value() if conn.password else None,
        extra=conn.extra)
    if wrapper.profile_name:
        raise conn.error("field extra.profile_name", "is not supported here: use keys, a role_arn or the AWS "
                         "default credential chain (AWS_PROFILE, instance profile, IRSA)")
    if wrapper.role_arn and wrapper.assume_role_method != "assume_role":
        raise conn.error("field extra.assume_role_method",
                         f"{wrapper.assume_role_method!r} is not supported (only assume_role)")
    return _access(conn, wrapper.aws_access_key_id, wrapper.aws_secret_access_key, wrapper.aws_session_token,
                   wrapper.region_name, wrapper.get_service_endpoint_url("s3"), wrapper.role_arn,
                   wrapper.assume_role_kwargs, wrapper.get_service_endpoint_url("sts", sts_connection_assume=True),
                   wrapper.verify)


def _service(conn: Connection, service: str) -> str | None:
    config = (conn.extra.get("service_config") or {}).get(service) or {}
    if not isinstance(config, dict):
        raise conn.error(f"field extra.service_config.{service}", "must be a JSON object")
    value = config.get("endpoint_url")
    if value is not None and not isinstance(value, str):
        raise conn.error(f"field extra.service_config.{service}.endpoint_url", "must be a string")
    return value or None


def _access(conn: Connection, key, secret, token, region, endpoint, role, role_kwargs, sts, verify) -> S3Access:
    if key and not secret:
        raise conn.error("field password", "is required with login: the secret access key (or neither, for the "
                         "AWS default credential chain)")
    if secret and not key:
        raise conn.error("field login", "is required with password: the access key id (or neither, for the "
                         "AWS default credential chain)")
    if token and not key:
        raise conn.error("field extra.aws_session_token", "needs the access key id and secret (login, password)")
    if not isinstance(role_kwargs, dict):
        raise conn.error("field extra.assume_role_kwargs", "must be a JSON object")
    if region is None:
        region = _default_region()
    return S3Access(source=conn.source, endpoint_url=endpoint or None, region=region, access_key=key or None,
                    secret_key=SecretStr(secret) if secret else None,
                    session_token=SecretStr(token) if token else None, role_arn=role or None,
                    role_kwargs={k: v for k, v in role_kwargs.items() if k in ROLE_KWARGS},
                    sts_endpoint_url=sts or None, verify=verify)


def _default_region() -> str:
    """boto3's own region (AWS_REGION / AWS_DEFAULT_REGION / shared config), else us-east-1."""
    import botocore.session

    return botocore.session.Session().get_config_variable("region") or DEFAULT_REGION


def session(access: S3Access):
    """A boto3 session with `access`'s credentials: its keys, else the AWS default chain; with a role,
    AssumeRole on those, refreshed by botocore before expiry (the provider's session factory does the same)."""
    import boto3

    base = boto3.session.Session(
        aws_access_key_id=access.access_key,
        aws_secret_access_key=access.secret_key.get_secret_value() if access.secret_key else None,
        aws_session_token=access.session_token.get_secret_value() if access.session_token else None,
        region_name=access.region)
    if not access.role_arn:
        return base
    import botocore.session
    from botocore.credentials import AssumeRoleCredentialFetcher, DeferredRefreshableCredentials

    source = base.get_credentials()
    if source is None:
        raise ConfigError(f"{access.source}: role_arn {access.role_arn} needs credentials to assume it with: keys "
                          "in the connection, or the AWS default credential chain (none found)")
    extra_args = {"RoleSessionName": access.role_session_name,
                  **{k: v for k, v in access.role_kwargs.items() if k != "RoleSessionName"}}
    fetcher = AssumeRoleCredentialFetcher(
        client_creator=functools.partial(base.client, endpoint_url=access.sts_endpoint_url, verify=access.verify),
        source_credentials=source, role_arn=access.role_arn, extra_args=extra_args)
    core = botocore.session.Session()
    # botocore has no public setter for a session's credentials; the Amazon provider sets it the same way.
    core._credentials = DeferredRefreshableCredentials(refresh_using=fetcher.fetch_credentials, method="assume-role")
    core.set_config_variable("region", access.region)
    return boto3.session.Session(botocore_session=core)


# What the platform does in its bucket, and nothing else: objects under any key (checkpoints, books,
# ledger, leases, heartbeats, archive, quarantine), listing, conditional writes (no extra permission: a
# precondition is part of PutObject) and the multipart uploads s3a and boto3 use for large objects. No
# bucket creation or deletion, no other bucket: create the bucket once with an admin identity.
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                  "s3:ListMultipartUploadParts")
BUCKET_ACTIONS = ("s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads")


def platform_policy(bucket: str) -> dict[str, Any]:
    """The least-privilege IAM policy of the platform's S3 identity for `bucket` (AWS IAM, or MinIO's
    ``mc admin policy create``; docs/operations.md § The platform's S3 identity, template docs/s3-policy.json)."""
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "AldebaranObjects", "Effect": "Allow", "Action": list(OBJECT_ACTIONS),
         "Resource": [f"arn:aws:s3:::{bucket}/*"]},
        {"Sid": "AldebaranBucket", "Effect": "Allow", "Action": list(BUCKET_ACTIONS),
         "Resource": [f"arn:aws:s3:::{bucket}"]},
    ]}


# --- Spark's s3a settings, from the same access -----------------------------------------------------
def s3a_conf(prefix: str = "spark.hadoop.", access=None) -> dict[str, str]:
    """Hadoop s3a settings for the object store, from the same resolved access as boto3's
    (:func:`resolve`: the connection ``aldebaran_s3``, else ALDEBARAN_S3_*; `access` overrides it).

    Credentials: keys → SimpleAWSCredentialsProvider; keys + session token →
    TemporaryAWSCredentialsProvider; a role → AssumedRoleCredentialProvider (``fs.s3a.assumed.role.*``, its
    source the keys or the default chain); none → the AWS SDK's default chain (environment, profile, web
    identity/IRSA, container, instance profile), as boto3 uses it."""
    a = access or resolve()
    conf = {
        "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3a.endpoint.region": a.region,
        "fs.s3a.connection.maximum": "64",
        "fs.s3a.fast.upload": "true",
    }
    if a.endpoint_url:
        conf["fs.s3a.endpoint"] = a.endpoint_url
        conf["fs.s3a.path.style.access"] = "true"
        conf["fs.s3a.connection.ssl.enabled"] = str(a.endpoint_url.startswith("https")).lower()
    if a.access_key:
        conf["fs.s3a.access.key"] = a.access_key
        conf["fs.s3a.secret.key"] = a.secret_key.get_secret_value()
        if a.session_token:
            conf["fs.s3a.session.token"] = a.session_token.get_secret_value()
    keys = (S3A_TEMPORARY if a.session_token else S3A_SIMPLE) if a.access_key else S3A_DEFAULT_CHAIN
    if a.role_arn:
        conf["fs.s3a.aws.credentials.provider"] = S3A_ASSUMED_ROLE
        conf["fs.s3a.assumed.role.arn"] = a.role_arn
        conf["fs.s3a.assumed.role.credentials.provider"] = keys
        conf["fs.s3a.assumed.role.session.name"] = a.role_session_name
        conf["fs.s3a.assumed.role.sts.endpoint.region"] = a.region
        if a.sts_endpoint_url:
            conf["fs.s3a.assumed.role.sts.endpoint"] = _sts_host(a)
        if a.role_kwargs.get("ExternalId"):
            conf["fs.s3a.assumed.role.external.id"] = str(a.role_kwargs["ExternalId"])
        if a.role_kwargs.get("DurationSeconds"):
            conf["fs.s3a.assumed.role.session.duration"] = f"{int(a.role_kwargs['DurationSeconds'])}s"
    else:
        conf["fs.s3a.aws.credentials.provider"] = keys
    return {prefix + k: v for k, v in conf.items()}


def _sts_host(a) -> str:
    """s3a takes the STS endpoint as a host name and calls it over https on port 443 (hadoop-aws 3.5's
    STSClientFactory): a URL it cannot express fails here, named, not in the JVM."""
    from urllib.parse import urlsplit

    url = urlsplit(a.sts_endpoint_url if "://" in a.sts_endpoint_url else "https://" + a.sts_endpoint_url)
    if url.scheme != "https" or url.port not in (None, 443) or url.path.strip("/") or not url.hostname:
        raise ConfigError(f"{a.source}: field extra.service_config.sts.endpoint_url: Spark's s3a assumes a role "
                          f"only through an https STS endpoint on port 443 (got {a.sts_endpoint_url}); give the "
                          "auditor keys or the default chain instead of role_arn, or put STS behind https")
    return url.hostname


S3A_SIMPLE = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
S3A_TEMPORARY = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
S3A_ASSUMED_ROLE = "org.apache.hadoop.fs.s3a.auth.AssumedRoleCredentialProvider"
# The AWS SDK v2's own chain (s3a instantiates it through its static create()): the s3a default list has
# no web identity provider, so IRSA would not work without it.
S3A_DEFAULT_CHAIN = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
