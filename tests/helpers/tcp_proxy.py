"""A loopback TCP proxy that a test can cut, to take one client off the network.

``TcpProxy(upstream_port).start()`` listens on 127.0.0.1 and forwards each connection to
the upstream port. ``cut()`` closes every forwarded connection and refuses new ones until
``restore()``: the client behind the proxy loses its server while everyone else keeps
theirs (a ZooKeeper session that can then expire on the server's side).
"""

from __future__ import annotations

import socket
import threading

from tests.helpers.broker import free_port


class TcpProxy:
    def __init__(self, upstream_port: int, *, port: int | None = None) -> None:
        self.upstream_port = upstream_port
        self.port = port or free_port()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        self._closed = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        listener = socket.create_server(("127.0.0.1", self.port))
        self._listener = listener
        threading.Thread(target=self._accept_loop, daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            self._close_all()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._close_all()
        if self._listener is not None:
            self._listener.close()

    def _close_all(self) -> None:
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._sockets.clear()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed or self._cut:
                    client.close()
                    continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets.difference_update((source, target))
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
