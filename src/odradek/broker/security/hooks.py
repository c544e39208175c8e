"""What the network layer asks of a secured listener (see ``NetworkServer(security=)``)."""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.security import principal
from odradek.broker.security.sasl import CredentialLookup, SaslGate
from odradek.broker.security.settings import ListenerSecurity

__all__ = ["ListenerHooks"]

log = logging.getLogger(__name__)


class ListenerHooks:
    def __init__(self, security: ListenerSecurity, lookup: CredentialLookup) -> None:
        self.security = security
        self.ssl_context = security.ssl_context
        self._lookup = lookup

    def principal_of(self, transport: Any, connection_id: str) -> str | None:
        """The TLS principal of a new connection (ANONYMOUS without a client certificate);
        None when the certificate's name matches no ``ssl.principal.mapping.rules``."""
        if self.ssl_context is None:
            return principal.ANONYMOUS
        ssl_object = transport.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        if not cert:
            return principal.ANONYMOUS
        dn = principal.dn_of_peercert(cert)
        try:
            name = principal.map_principal(dn, self.security.principal_rules)
        except ValueError as exc:
            log.warning("closing connection %s: %s", connection_id, exc)
            return None
        log.info(
            "connection %s on listener %s: client certificate principal %s",
            connection_id,
            self.security.listener,
            name,
        )
        return name

    def sasl_gate(self, connection_id: str, api_versions: Any) -> SaslGate | None:
        if not self.security.uses_sasl:
            return None
        return SaslGate(self.security, self._lookup, dict(api_versions), connection_id)
