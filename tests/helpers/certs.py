"""Throw-away TLS material for tests, generated with ``cryptography`` (never checked in).

``make_pki(directory)`` writes a CA, a server certificate for 127.0.0.1/localhost and a
client certificate (``CN=alice,OU=eng,O=acme``), and returns their paths.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path  # CA certificate (PEM): the trust store of both sides
    server: Path  # server key + certificate chain in one PEM file (ssl.keystore.location)
    server_key: Path
    server_cert: Path
    client_key: Path
    client_cert: Path
    encrypted_server: Path  # key encrypted with "key-pass" + chain
    other_ca_client_key: Path  # a client certificate from a CA the broker does not trust
    other_ca_client_cert: Path


def _name(**parts: str) -> x509.Name:
    oids = {
        "CN": NameOID.COMMON_NAME,
        "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
        "O": NameOID.ORGANIZATION_NAME,
    }
    # Written most specific first, as RFC 2253 prints names; stored the other way round.
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in reversed(parts.items())])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: x509.Name,
    key,
    issuer: x509.Name,
    issuer_key,
    *,
    ca: bool = False,
    san: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key, password: bytes | None = None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, other_key = _key(), _key()
    ca_name, other_name = _name(CN="odradek test CA"), _name(CN="someone else's CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    other_ca = _cert(other_name, other_key, other_name, other_key, ca=True)
    server_key = _key()
    server = _cert(
        _name(CN="localhost"),
        server_key,
        ca_name,
        ca_key,
        san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_key = _key()
    client = _cert(_name(CN="alice", OU="eng", O="acme"), client_key, ca_name, ca_key)
    stranger_key = _key()
    stranger = _cert(_name(CN="mallory"), stranger_key, other_name, other_key)
    files = {
        "ca": _pem_cert(ca),
        "server": _pem_key(server_key) + _pem_cert(server) + _pem_cert(ca),
        "server_key": _pem_key(server_key),
        "server_cert": _pem_cert(server) + _pem_cert(ca),
        "client_key": _pem_key(client_key),
        "client_cert": _pem_cert(client),
        "encrypted_server": _pem_key(server_key, b"key-pass") + _pem_cert(server),
        "other_ca_client_key": _pem_key(stranger_key),
        "other_ca_client_cert": _pem_cert(stranger) + _pem_cert(other_ca),
    }
    paths = {}
    for name, data in files.items():
        path = directory / f"{name}.pem"
        path.write_bytes(data)
        path.chmod(0o600)
        paths[name] = path
    return Pki(**paths)
