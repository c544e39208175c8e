"""A connection from one broker to another: the controller's channel, replica fetchers,
transaction markers and controlled shutdown all open theirs through a :data:`Connector`.

The cluster layer only knows that a connector gives an open, ready link; how it secures
it (TLS, SASL on the inter-broker listener) is decided by the broker, which passes
:func:`odradek.broker.security.inter_broker.InterBrokerSecurity.connect` down. A link
whose SASL session has a lifetime (``connections.max.reauth.ms`` on the peer, KIP-368) is
:attr:`PeerLink.stale` before the peer would close it, and its owner opens a new one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from odradek import timeouts

__all__ = ["AuthenticationError", "Connector", "PeerLink", "open_plaintext"]


class AuthenticationError(OSError):
    """The peer refused this broker's credentials or certificate (one line, no secret).
    An OSError, so every channel's "connection failed, retry later" path handles it."""


@dataclass(eq=False)
class PeerLink:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    renew_at: float = float("inf")  # time.monotonic() after which a new link is needed

    @property
    def stale(self) -> bool:
        return time.monotonic() >= self.renew_at

    def close(self) -> None:
        self.writer.close()


# (host, port, timeout in seconds, client id) -> an open link, ready for requests.
Connector = Callable[[str, int, float, str], Awaitable[PeerLink]]


async def open_plaintext(host: str, port: int, timeout_s: float, _client_id: str) -> PeerLink:
    reader, writer = await timeouts.wait_for(asyncio.open_connection(host, port), timeout_s)
    return PeerLink(reader, writer)
