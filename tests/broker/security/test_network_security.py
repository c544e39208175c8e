"""The network layer on TLS and SASL listeners: file regions are copied through TLS (never
sendfile'd under it), SASL without TLS keeps sendfile, and the principal is the
connection's."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from odradek.broker.network import NetworkServer
from odradek.broker.requests import RequestContext
from odradek.broker.security.hooks import ListenerHooks
from odradek.broker.security.settings import ListenerSecurity, listener_security
from odradek.protocol.build import build_request
from odradek.protocol.codec import encode_request
from tests.broker.test_network import (
    FETCH,
    LOOPS,
    Client,
    FetchHandler,
    data_file,  # noqa: F401 - a fixture
    fetch_request,
    run,
)
from tests.helpers.certs import Pki, make_pki

pytestmark = pytest.mark.timeout(60)
REGIONS = {0: (0, 3 * 1024 * 1024), 1: (77, 4000)}
TOTAL = sum(length for _position, length in REGIONS.values())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


class PrincipalFetchHandler(FetchHandler):
    def __init__(self, fd: int) -> None:
        super().__init__(fd, REGIONS)
        self.principals: list[str] = []

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        self.principals.append(ctx.principal)
        return await super().handle(ctx, request)


async def _fetch_and_check(client: Client, data: bytes) -> None:
    client.send(fetch_request(11), 1)
    _cid, response = await client.read(FETCH, 11)
    for partition in response.responses[0].partitions:
        position, length = REGIONS[partition.partition_index]
        assert partition.records == data[position : position + length]


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_tls_copies_file_regions_and_knows_the_client_certificate(
    loop_kind: str,
    pki: Pki,
    data_file: tuple[int, bytes],  # noqa: F811
) -> None:
    fd, data = data_file
    security = listener_security(
        "SSL",
        "SSL",
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": "required",
        },
    )

    async def main() -> None:
        handler = PrincipalFetchHandler(fd)
        hooks = ListenerHooks(security, lambda _u, _m: None)
        server = NetworkServer(handler, "127.0.0.1", 0, security=hooks)
        await server.start()
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(pki.client_cert, pki.client_key)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=context, server_hostname="localhost", limit=2**26
        )
        client = Client(reader, writer)
        await _fetch_and_check(client, data)
        assert server.bytes_sent_with_sendfile == 0
        assert server.bytes_copied_from_regions == TOTAL
        assert handler.principals == ["User:CN=alice,OU=eng,O=acme"]
        client.close()
        await server.shutdown(timeout=5)

    run(loop_kind, main)


def test_sasl_without_tls_keeps_sendfile(data_file: tuple[int, bytes]) -> None:  # noqa: F811
    fd, data = data_file
    security = ListenerSecurity(
        "SASL_PLAINTEXT", "SASL_PLAINTEXT", mechanisms=("PLAIN",), plain_users={"al": "pw"}
    )

    async def main() -> None:
        handler = PrincipalFetchHandler(fd)
        server = NetworkServer(
            handler, "127.0.0.1", 0, security=ListenerHooks(security, lambda _u, _m: None)
        )
        await server.start()
        client = await Client.connect(server.port)
        client.send(build_request(17, 1, {"mechanism": "PLAIN"}), 1)
        await client.read(17, 1)
        client.send_raw(
            encode_request(2, 2, "t", build_request(36, 2, {"auth_bytes": b"\x00al\x00pw"}))
        )
        _cid, answer = await client.read(36, 2)
        assert answer.error_code == 0
        await _fetch_and_check(client, data)
        assert server.bytes_sent_with_sendfile == TOTAL
        assert handler.principals == ["User:al"]
        assert [c["principal"] for c in server.connection_stats()] == ["User:al"]
        client.close()
        await server.shutdown(timeout=5)

    run("asyncio", main)
