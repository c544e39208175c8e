"""The TLS server context of an SSL or SASL_SSL listener, from Kafka's ``ssl.*`` keys.

Only PEM stores exist here (Python's ``ssl`` has no JKS/PKCS12 key stores):
``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (one file holding the private key
and the certificate chain) or the inline ``ssl.keystore.key`` and
``ssl.keystore.certificate.chain`` (KIP-651), ``ssl.key.password`` for an encrypted key;
``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` or inline
``ssl.truststore.certificates``. Errors are ``ValueError`` with one line naming the key.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
import textwrap
from collections.abc import Callable

__all__ = ["build_client_context", "build_server_context"]

Lookup = Callable[[str], str | None]

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def _normalise_pem(text: str) -> str:
    """Re-wrap PEM blocks: a properties value continued with ``\\`` loses its newlines,
    which Kafka's PEM reader tolerates and OpenSSL does not."""
    blocks = []
    for kind, body in _PEM_BLOCK.findall(text):
        if "Proc-Type" in body:  # legacy encrypted PEM keeps its header lines
            blocks.append(f"-----BEGIN {kind}-----{body}-----END {kind}-----\n")
            continue
        data = re.sub(r"\s+", "", body)
        wrapped = "\n".join(textwrap.wrap(data, 64))
        blocks.append(f"-----BEGIN {kind}-----\n{wrapped}\n-----END {kind}-----\n")
    if not blocks:
        raise ValueError("no PEM block found")
    return "".join(blocks)


def _store_type(get: Lookup, key: str) -> None:
    kind = (get(key) or "JKS").upper()
    if kind != "PEM":
        raise ValueError(f"{key}={kind} is not supported; set {key}=PEM (PEM files only)")


def _load_keystore(context: ssl.SSLContext, get: Lookup) -> None:
    location = get("ssl.keystore.location")
    chain = get("ssl.keystore.certificate.chain")
    key = get("ssl.keystore.key")
    password = get("ssl.key.password") or None
    if location and (chain or key):
        raise ValueError(
            "set either ssl.keystore.location or ssl.keystore.certificate.chain "
            "with ssl.keystore.key, not both"
        )
    if not location and not (chain and key):
        raise ValueError(
            "an SSL listener needs ssl.keystore.location, or ssl.keystore.certificate.chain "
            "and ssl.keystore.key"
        )
    _store_type(get, "ssl.keystore.type")
    try:
        if location:
            context.load_cert_chain(location, password=password)
            return
        # ssl only loads keys from files: a private directory, removed at once.
        with tempfile.TemporaryDirectory(prefix="odradek-tls-") as directory:
            path = os.path.join(directory, "keystore.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(_normalise_pem(key or "") + _normalise_pem(chain or ""))
            context.load_cert_chain(path, password=password)
    except (OSError, ssl.SSLError, ValueError) as exc:
        where = f"ssl.keystore.location {location}" if location else "ssl.keystore.key/chain"
        raise ValueError(f"cannot load the key store ({where}): {exc}") from None


def _load_truststore(context: ssl.SSLContext, get: Lookup, purpose: ssl.Purpose) -> None:
    location = get("ssl.truststore.location")
    inline = get("ssl.truststore.certificates")
    if not location and not inline:
        context.load_default_certs(purpose)
        return
    _store_type(get, "ssl.truststore.type")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        else:
            context.load_verify_locations(cadata=_normalise_pem(inline or ""))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ValueError(f"cannot load the trust store: {exc}") from None


def _versions_and_ciphers(context: ssl.SSLContext, get: Lookup) -> None:
    protocols = [p.strip() for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",")]
    protocols = [p for p in protocols if p]
    unknown = [p for p in protocols if p not in _VERSIONS]
    if unknown or not protocols:
        raise ValueError(
            f"ssl.enabled.protocols: unknown protocol {', '.join(unknown) or '(none)'} "
            f"(known: {', '.join(_VERSIONS)})"
        )
    versions = sorted(_VERSIONS[p] for p in protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    ciphers = [c.strip() for c in (get("ssl.cipher.suites") or "").split(",") if c.strip()]
    # TLS 1.3 suites cannot be restricted through Python's ssl; the others can.
    legacy = [c for c in ciphers if not c.startswith("TLS_AES") and not c.startswith("TLS_CHACHA")]
    if legacy:
        try:
            context.set_ciphers(":".join(legacy))
        except ssl.SSLError:
            raise ValueError(
                f"ssl.cipher.suites: none of {', '.join(legacy)} is a cipher OpenSSL knows "
                "(use OpenSSL names, e.g. ECDHE-RSA-AES128-GCM-SHA256)"
            ) from None


def build_server_context(get: Lookup) -> ssl.SSLContext:
    """``get(key)`` returns the listener's value of a Kafka ``ssl.*`` key or None."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions_and_ciphers(context, get)
    client_auth = (get("ssl.client.auth") or "none").strip().lower()
    if client_auth not in _CLIENT_AUTH:
        raise ValueError(
            f"ssl.client.auth: expected none, requested or required, got {client_auth!r}"
        )
    _load_keystore(context, get)
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(context, get, ssl.Purpose.CLIENT_AUTH)
    return context


def build_client_context(get: Lookup) -> ssl.SSLContext:
    """The context a broker connects to another broker's listener with, from that
    listener's keys (as Kafka's inter-broker client): the trust store verifies the peer's
    certificate, the key store is presented (mutual TLS, ``ssl.client.auth=required``), and
    ``ssl.endpoint.identification.algorithm`` (default ``https``) checks the host name."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions_and_ciphers(context, get)
    if get("ssl.keystore.location") or get("ssl.keystore.key"):
        _load_keystore(context, get)
    _load_truststore(context, get, ssl.Purpose.SERVER_AUTH)
    raw = get("ssl.endpoint.identification.algorithm")  # empty: no host name check
    algorithm = "https" if raw is None else raw.strip().lower()
    if algorithm not in ("https", ""):
        raise ValueError(
            f"ssl.endpoint.identification.algorithm: expected https or empty, got {algorithm!r}"
        )
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context
