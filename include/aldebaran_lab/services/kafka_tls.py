"""The local broker's secured listener (SASL_SSL, SCRAM-SHA-512 and PLAIN): its TLS material and its
description for clients and tests.

At every start, a CA and a server certificate for the listener's host (127.0.0.1 / localhost) are made
in ``<run dir>/kafka/tls`` when absent or expiring (``cryptography``): ``ca.pem`` (what a client trusts,
librdkafka's ``ssl.ca.location``) and ``server.pem`` (the broker's PEM keystore: PKCS#8 key + chain,
``ssl.keystore.type=PEM``). The SCRAM user and PLAIN user is ``aldebaran``, its password
ALDEBARAN_KAFKA_SECURE_PASSWORD (generated into .env by ``aldebaran services up``).
``<run dir>/kafka/secure-listener.json`` says where it is (no password): the tests' fixtures read it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from aldebaran.exceptions import ConfigError

USER = "aldebaran"
MECHANISMS = ("SCRAM-SHA-512", "PLAIN")
PASSWORD_ENV = "ALDEBARAN_KAFKA_SECURE_PASSWORD"
PORT_ENV = "ALDEBARAN_KAFKA_SECURE_PORT"
DEFAULT_PORT = 9094
VALID_DAYS = 365
RENEW_DAYS = 30
DESCRIPTION = "secure-listener.json"


@dataclass(frozen=True)
class SecureListener:
    """Where the secured listener is and how to reach it (no password: that is in the environment)."""

    bootstrap_servers: str
    ca_location: str
    username: str
    mechanisms: tuple[str, ...]
    password_env: str = PASSWORD_ENV

    def connection(self, mechanism: str = "SCRAM-SHA-512", password: str | None = None) -> dict:
        """The Airflow Kafka connection (JSON form) of this listener for `mechanism`."""
        return {"conn_type": "kafka", "extra": {
            "bootstrap.servers": self.bootstrap_servers, "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism, "sasl.username": self.username,
            "sasl.password": password if password is not None else secure_password(),
            "ssl.ca.location": self.ca_location}}


def secure_port() -> int:
    """The listener's port (ALDEBARAN_KAFKA_SECURE_PORT, default 9094; 0 = no secured listener)."""
    raw = os.environ.get(PORT_ENV, "").strip() or str(DEFAULT_PORT)
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{PORT_ENV}: must be a port number, or 0 for no secured listener (got {raw!r})") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{PORT_ENV}: must be a port number, or 0 for no secured listener (got {raw!r})")
    return port


def has_password() -> bool:
    return len(os.environ.get(PASSWORD_ENV, "")) >= 16


def secure_password() -> str:
    password = os.environ.get(PASSWORD_ENV, "")
    if len(password) < 16:
        raise ConfigError(f"{PASSWORD_ENV} must be set (16 characters or more) for the broker's secured listener "
                          "(`aldebaran services up` generates it into .env; ALDEBARAN_KAFKA_SECURE_PORT=0 disables it)")
    return password


def ensure_tls(directory: Path, host: str) -> tuple[Path, Path]:
    """(ca.pem, server.pem) in `directory`, made anew when absent or within RENEW_DAYS of expiring."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_path, server_path, cert_path = directory / "ca.pem", directory / "server.pem", directory / "server-cert.pem"
    now = dt.datetime.now(dt.timezone.utc)
    if ca_path.exists() and server_path.exists() and cert_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if cert.not_valid_after_utc - now > dt.timedelta(days=RENEW_DAYS):
            return ca_path, server_path
    directory.mkdir(parents=True, exist_ok=True)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Aldebaran local platform"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("Aldebaran local CA")).issuer_name(name("Aldebaran local CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for address in {host, "127.0.0.1"}:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            names.append(x509.DNSName(address))
    server = (x509.CertificateBuilder().subject_name(name(host)).issuer_name(ca.subject)
              .public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    server_path.write_bytes(key_pem + server.public_bytes(pem) + ca.public_bytes(pem))
    os.chmod(server_path, 0o600)
    ca_path.write_bytes(ca.public_bytes(pem))
    cert_path.write_bytes(server.public_bytes(pem))
    return ca_path, server_path


def listener_properties(host: str, port: int, keystore: Path, password: str) -> dict[str, str]:
    """server.properties entries of the SASL_SSL listener (its name and protocol: SASL_SSL)."""
    plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
             f'user_{USER}="{password}";')
    return {
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": str(keystore),
        "listener.name.sasl_ssl.ssl.client.auth": "none",
    }


def write_description(home: Path, listener: SecureListener) -> None:
    (home / DESCRIPTION).write_text(json.dumps({**asdict(listener), "mechanisms": list(listener.mechanisms)}, indent=1))


def read_description(home: Path) -> SecureListener | None:
    """The running broker's secured listener, or None if it has none."""
    path = home / DESCRIPTION
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return SecureListener(**{**data, "mechanisms": tuple(data["mechanisms"])})


def create_scram_user(bootstrap_plaintext: str, password: str) -> None:
    """Create (or update) the SCRAM-SHA-512 credential of USER, over the plaintext listener."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap_plaintext, "log_level": 3})
    upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=30).values():
        future.result()
