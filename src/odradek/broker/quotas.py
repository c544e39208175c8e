"""Broker-wide limits shared by every listener: connection counts and request memory.

``ConnectionQuotas`` follows Kafka's ``max.connections`` (when reached, the acceptors stop
accepting; new connections wait in the kernel's backlog until one closes) and
``max.connections.per.ip`` with ``max.connections.per.ip.overrides`` (a connection over
its address's limit is closed as soon as it is accepted).

``MemoryPool`` bounds the bytes of requests the broker holds at once, received but not
yet answered, as Kafka's ``queued.max.request.bytes`` does. Kafka reserves a request's
whole declared size when its size prefix arrives; here bytes are charged as they arrive
(a connection's buffer grows only with what its peer really sent), so a peer that
declares a huge frame and then stalls holds only what it sent. A connection that needs
more while the pool is exhausted stops reading (Kafka mutes the channel) and resumes
when requests are answered and the pool has room again.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping

__all__ = ["ConnectionQuotas", "MemoryPool"]

INT_MAX = 2**31 - 1


class ConnectionQuotas:
    """Counts connections broker-wide and per address (see the module docstring)."""

    def __init__(
        self,
        max_connections: int = INT_MAX,
        max_per_ip: int = INT_MAX,
        per_ip_overrides: Mapping[str, int] | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self._overrides: dict[str, int] = {}
        for host, limit in (per_ip_overrides or {}).items():
            for address in _addresses(host):
                self._overrides[address] = limit
        self.total = 0
        self._per_ip: dict[str, int] = {}
        self._room = asyncio.Event()
        self._room.set()
        self.refused_per_ip = 0

    def limit_for(self, ip: str) -> int:
        return self._overrides.get(ip, self.max_per_ip)

    async def wait_for_room(self) -> None:
        """Return once the broker is below ``max.connections``."""
        while self.total >= self.max_connections:
            self._room.clear()
            await self._room.wait()

    def try_add(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False if that address is at its limit."""
        count = self._per_ip.get(ip, 0)
        if count >= self.limit_for(ip):
            self.refused_per_ip += 1
            return False
        self._per_ip[ip] = count + 1
        self.total += 1
        return True

    def remove(self, ip: str) -> None:
        count = self._per_ip.get(ip, 0) - 1
        if count > 0:
            self._per_ip[ip] = count
        else:
            self._per_ip.pop(ip, None)
        self.total -= 1
        if self.total < self.max_connections:
            self._room.set()


def _addresses(host: str) -> set[str]:
    """The addresses a host name stands for (an address stands for itself)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return {host}
    return {str(info[4][0]) for info in infos} | {host}


class MemoryPool:
    """Bytes of requests held across the broker; ``capacity`` None means unlimited.

    Charging never fails: the caller has the bytes already (they came off the socket). What
    the pool decides is whether the caller may read more; ``waiters`` are called back
    (once each) when memory is released below capacity.
    """

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity if capacity is not None and capacity > 0 else None
        self.used = 0
        self.peak = 0
        self._waiters: dict[object, Callable[[], None]] = {}

    @property
    def exhausted(self) -> bool:
        return self.capacity is not None and self.used >= self.capacity

    def charge(self, size: int) -> None:
        self.used += size
        if self.used > self.peak:
            self.peak = self.used

    def release(self, size: int) -> None:
        if size <= 0:
            return
        self.used -= size
        if self._waiters and not self.exhausted:
            waiters, self._waiters = self._waiters, {}
            for resume in waiters.values():
                resume()

    def wait(self, owner: object, resume: Callable[[], None]) -> None:
        """Call ``resume`` when the pool has room again (replaces an earlier wait)."""
        self._waiters[owner] = resume

    def forget(self, owner: object) -> None:
        self._waiters.pop(owner, None)
