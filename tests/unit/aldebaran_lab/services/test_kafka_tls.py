"""The local broker's secured listener (aldebaran_lab.services.kafka / kafka_tls): its properties beside the
plaintext listener, and its certificate."""

from __future__ import annotations

from aldebaran.settings import KafkaSettings


def test_the_secured_listener_sits_beside_the_plaintext_one(tmp_path):
    from aldebaran_lab.services import kafka_tls
    from aldebaran_lab.services.kafka import server_properties

    common = dict(node_id=1, host="127.0.0.1", port=9092, controller_port=9093, data=tmp_path, settings=KafkaSettings(),
                  quorum="controller.quorum.bootstrap.servers=127.0.0.1:9093")
    plain = server_properties(**common).splitlines()
    assert "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in plain  # the HA profile's form
    assert "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT" in plain
    extra = kafka_tls.listener_properties("127.0.0.1", 9094, tmp_path / "server.pem", "p" * 20)
    secured = server_properties(**common, secure_port=9094, extra=extra).splitlines()
    assert "listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093" in secured
    assert "inter.broker.listener.name=PLAINTEXT" in secured
    assert "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN" in secured
    assert "listener.name.sasl_ssl.ssl.keystore.type=PEM" in secured


def test_the_listeners_certificate_is_signed_by_its_ca_for_the_loopback_address(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from aldebaran_lab.services import kafka_tls

    ca_path, keystore = kafka_tls.ensure_tls(tmp_path, "127.0.0.1")
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    cert = x509.load_pem_x509_certificate((tmp_path / "server-cert.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    assert keystore.read_text().startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8 first, then the chain
    assert kafka_tls.ensure_tls(tmp_path, "127.0.0.1") == (ca_path, keystore)  # kept while valid
    assert ca_path.read_bytes() == ca.public_bytes(serialization.Encoding.PEM)
