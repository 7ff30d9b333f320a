"""How the object store is reached (aldebaran.storage.s3access) and the s3a settings Spark gets from the same
resolved access (aldebaran.storage.s3access.s3a_conf): keys, session token, role, default chain; the precedence
connection → ALDEBARAN_S3_*; our Airflow-free reading of an AWS connection against the Amazon provider's
own ``AwsConnectionWrapper``. No services (tests/integration/test_s3_connection.py has MinIO and Airflow)."""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr

from aldebaran.storage import s3access
from aldebaran.storage.connections import Connection
from aldebaran.exceptions import ConfigError
from aldebaran.storage.s3access import S3Access, s3a_conf

SECRET = "s3cr3t-" + "x" * 30
MINIO = "http://127.0.0.1:9000"
ROLE = "arn:aws:iam::123456789012:role/aldebaran-auditor"


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("AIRFLOW_CONN_ALDEBARAN_S3", "AIRFLOW_CONN_AWS_DEFAULT", "ALDEBARAN_S3_CONNECTION",
                 "ALDEBARAN_S3_ENDPOINT_URL", "ALDEBARAN_S3_ACCESS_KEY", "ALDEBARAN_S3_SECRET_KEY",
                 "ALDEBARAN_S3_SESSION_TOKEN", "ALDEBARAN_S3_ROLE_ARN", "ALDEBARAN_S3_REGION",
                 "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def conn(source: str = "AIRFLOW_CONN_ALDEBARAN_S3", **fields) -> Connection:
    return Connection.from_fields(source, {"conn_type": "aws", **fields})


def hadoop(access: S3Access) -> dict[str, str]:
    return s3a_conf(prefix="", access=access)


# --- s3a settings from the resolved access ------------------------------------------------------------
def test_s3a_keys_use_the_simple_provider_with_the_minio_endpoint():
    conf = hadoop(S3Access("t", endpoint_url=MINIO, region="eu-west-1", access_key="AK", secret_key=SecretStr(SECRET)))
    assert conf["fs.s3a.aws.credentials.provider"] == "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    assert (conf["fs.s3a.access.key"], conf["fs.s3a.secret.key"]) == ("AK", SECRET)
    assert conf["fs.s3a.endpoint"] == MINIO and conf["fs.s3a.path.style.access"] == "true"
    assert conf["fs.s3a.connection.ssl.enabled"] == "false" and conf["fs.s3a.endpoint.region"] == "eu-west-1"
    assert "fs.s3a.session.token" not in conf and not any(k.startswith("fs.s3a.assumed.role") for k in conf)


def test_s3a_session_token_uses_the_temporary_provider():
    conf = hadoop(S3Access("t", access_key="ASIA1", secret_key=SecretStr(SECRET), session_token=SecretStr("tok-1")))
    assert conf["fs.s3a.aws.credentials.provider"] == "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    assert conf["fs.s3a.session.token"] == "tok-1" and conf["fs.s3a.access.key"] == "ASIA1"
    assert "fs.s3a.endpoint" not in conf and "fs.s3a.path.style.access" not in conf  # AWS S3: its own endpoints


def test_s3a_role_assumes_it_with_the_keys_as_source():
    conf = hadoop(S3Access("t", endpoint_url=MINIO, access_key="AK", secret_key=SecretStr(SECRET), role_arn=ROLE,
                           role_kwargs={"ExternalId": "ext-7", "DurationSeconds": 1800, "RoleSessionName": "audit"},
                           sts_endpoint_url="https://sts.eu-west-1.amazonaws.com"))
    assert conf["fs.s3a.aws.credentials.provider"] == "org.apache.hadoop.fs.s3a.auth.AssumedRoleCredentialProvider"
    assert conf["fs.s3a.assumed.role.arn"] == ROLE
    assert conf["fs.s3a.assumed.role.credentials.provider"] == "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    assert conf["fs.s3a.assumed.role.sts.endpoint"] == "sts.eu-west-1.amazonaws.com"  # s3a: a host, https:443
    assert conf["fs.s3a.assumed.role.sts.endpoint.region"] == "us-east-1"
    assert conf["fs.s3a.assumed.role.session.name"] == "audit"
    assert conf["fs.s3a.assumed.role.external.id"] == "ext-7"
    assert conf["fs.s3a.assumed.role.session.duration"] == "1800s"


def test_s3a_cannot_assume_a_role_through_a_plain_http_sts_and_says_so():
    access = S3Access("AIRFLOW_CONN_ALDEBARAN_S3", endpoint_url=MINIO, access_key="AK", secret_key=SecretStr(SECRET),
                      role_arn=ROLE, sts_endpoint_url=MINIO)
    with pytest.raises(ConfigError) as err:
        hadoop(access)
    assert str(err.value).startswith("AIRFLOW_CONN_ALDEBARAN_S3: field extra.service_config.sts.endpoint_url: "
                                     "Spark's s3a assumes a role only through an https STS endpoint on port 443")
    assert SECRET not in str(err.value)


def test_s3a_role_without_keys_assumes_it_from_the_default_chain():
    conf = hadoop(S3Access("t", role_arn=ROLE))
    assert conf["fs.s3a.aws.credentials.provider"] == "org.apache.hadoop.fs.s3a.auth.AssumedRoleCredentialProvider"
    assert conf["fs.s3a.assumed.role.credentials.provider"] == s3access_default_chain()
    assert conf["fs.s3a.assumed.role.session.name"] == "aldebaran"
    assert "fs.s3a.assumed.role.sts.endpoint" not in conf  # AWS STS
    assert "fs.s3a.access.key" not in conf and "fs.s3a.secret.key" not in conf


def test_s3a_without_credentials_uses_the_sdk_default_chain():
    conf = hadoop(S3Access("t"))
    assert conf["fs.s3a.aws.credentials.provider"] == s3access_default_chain()
    assert not any(k in conf for k in ("fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token"))


def s3access_default_chain() -> str:
    return "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"


def test_s3a_conf_resolves_the_connection_from_the_environment(clean_env):
    clean_env.setenv("ALDEBARAN_S3_ACCESS_KEY", "env-key")
    clean_env.setenv("ALDEBARAN_S3_SECRET_KEY", "env-secret-" + "y" * 20)
    clean_env.setenv("AIRFLOW_CONN_ALDEBARAN_S3", json.dumps({
        "conn_type": "aws", "extra": {"endpoint_url": "https://minio.internal:9000", "role_arn": ROLE}}))
    conf = s3a_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://minio.internal:9000"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert conf["spark.hadoop.fs.s3a.assumed.role.arn"] == ROLE
    assert "spark.hadoop.fs.s3a.access.key" not in conf  # the connection is used whole: no env keys mixed in


# --- precedence -----------------------------------------------------------------------------------
def test_without_a_connection_the_settings_are_used(clean_env):
    clean_env.setenv("ALDEBARAN_S3_ACCESS_KEY", "env-key")
    clean_env.setenv("ALDEBARAN_S3_SECRET_KEY", SECRET)
    clean_env.setenv("ALDEBARAN_S3_ROLE_ARN", ROLE)
    access = s3access.resolve()
    assert access.source.startswith("ALDEBARAN_S3_*") and access.endpoint_url == MINIO
    assert (access.access_key, access.credentials) == ("env-key", "role")


def test_the_connection_wins_over_the_settings(clean_env):
    clean_env.setenv("ALDEBARAN_S3_ACCESS_KEY", "env-key")
    clean_env.setenv("ALDEBARAN_S3_SECRET_KEY", SECRET)
    clean_env.setenv("AIRFLOW_CONN_ALDEBARAN_S3", f"aws://conn-key:{SECRET}@/?endpoint_url=http%3A%2F%2Fminio%3A9000"
                                                  "&region_name=eu-central-1")
    access = s3access.resolve()
    assert access.source == "AIRFLOW_CONN_ALDEBARAN_S3"
    assert (access.access_key, access.endpoint_url, access.region) == ("conn-key", "http://minio:9000", "eu-central-1")


def test_the_setting_can_name_aws_default_or_no_connection(clean_env):
    clean_env.setenv("AIRFLOW_CONN_ALDEBARAN_S3", json.dumps({"conn_type": "aws", "login": "a", "password": SECRET}))
    clean_env.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({"conn_type": "aws", "extra": {"region_name": "ap-south-1"}}))
    clean_env.setenv("ALDEBARAN_S3_CONNECTION", "aws_default")
    access = s3access.resolve()
    assert (access.source, access.credentials, access.region) == ("AIRFLOW_CONN_AWS_DEFAULT", "default", "ap-south-1")
    assert access.endpoint_url is None  # the connection has none: AWS S3, not ALDEBARAN_S3_ENDPOINT_URL
    clean_env.setenv("ALDEBARAN_S3_CONNECTION", "")
    assert s3access.resolve().source == "ALDEBARAN_S3_*"


def test_connection_env_hands_a_child_the_connection(clean_env):
    assert s3access.connection_env() == {}
    clean_env.setenv("AIRFLOW_CONN_ALDEBARAN_S3", f"aws://k:{SECRET}@")
    env = s3access.connection_env()
    assert list(env) == ["AIRFLOW_CONN_ALDEBARAN_S3"]
    assert Connection.parse("child", env["AIRFLOW_CONN_ALDEBARAN_S3"]).password.get_secret_value() == SECRET


def test_connection_of_the_settings_reads_back_the_same(clean_env):
    clean_env.setenv("ALDEBARAN_S3_ACCESS_KEY", "env-key")
    clean_env.setenv("ALDEBARAN_S3_SECRET_KEY", SECRET)
    from aldebaran.settings import ObjectStoreSettings, load

    settings = load(ObjectStoreSettings)
    again = s3access.from_connection(conn(**s3access.connection_of(settings)))
    assert again == S3Access("AIRFLOW_CONN_ALDEBARAN_S3", MINIO, "us-east-1", "env-key", SecretStr(SECRET))


# --- the connection's shape: errors, and the Amazon provider's reading -------------------------------
@pytest.mark.parametrize("fields,field", [
    ({"conn_type": "http"}, "field conn_type"),
    ({"login": "only-the-key"}, "field password"),
    ({"password": SECRET}, "field login"),
    ({"extra": {"aws_session_token": "t"}}, "field extra.aws_session_token"),
    ({"extra": {"assume_role_method": "assume_role_with_saml", "role_arn": ROLE}}, "field extra.assume_role_method"),
    ({"extra": {"profile_name": "prod"}}, "field extra.profile_name"),
    ({"extra": {"service_config": {"sts": "x"}}}, "field extra.service_config.sts"),
])
def test_a_bad_connection_names_itself_and_the_field_never_the_secret(fields, field):
    with pytest.raises(ConfigError) as err:
        s3access.from_connection(conn(**fields))
    assert str(err.value).startswith(f"AIRFLOW_CONN_ALDEBARAN_S3: {field}")
    assert SECRET not in str(err.value)


def test_the_secret_is_never_in_the_repr():
    access = s3access.from_connection(conn(login="k", password=SECRET, extra={"aws_session_token": "tok-" + SECRET}))
    assert SECRET not in repr(access) and SECRET not in access.describe()


SHAPES = [
    {"login": "AKIA1", "password": SECRET, "extra": {"endpoint_url": MINIO, "region_name": "eu-west-1"}},
    {"login": "ASIA1", "password": SECRET, "extra": {"aws_session_token": "tok", "region_name": "us-west-2"}},
    {"extra": {"aws_access_key_id": "AKIA2", "aws_secret_access_key": SECRET, "region_name": "eu-west-1"}},
    {"extra": {"role_arn": ROLE, "region_name": "eu-west-1",
               "assume_role_kwargs": {"ExternalId": "e", "RoleSessionName": "r"}}},
    {"login": "AKIA3", "password": SECRET, "extra": {
        "endpoint_url": MINIO, "role_arn": ROLE, "region_name": "us-east-1",
        "service_config": {"sts": {"endpoint_url": MINIO}, "s3": {"endpoint_url": "http://s3.internal:9000"}}}},
    {"extra": {"region_name": "eu-north-1", "verify": False}},
]


@pytest.mark.parametrize("fields", SHAPES, ids=range(len(SHAPES)))
def test_our_reading_is_the_amazon_providers(fields):
    """Outside Airflow the connection is read without the provider (importing Airflow costs seconds per
    process); inside a task the provider's AwsConnectionWrapper reads it. Both must agree."""
    import tests.airflow_home  # noqa: F401  (Airflow's test home, before airflow is imported)

    ours = s3access.from_connection(conn(**fields))
    theirs = s3access.from_provider(conn("Airflow connection aldebaran_s3", **fields), "aldebaran_s3")
    assert {**vars(theirs), "source": None} == {**vars(ours), "source": None}
