"""A cluster broker's client quotas and SCRAM credentials, kept in ZooKeeper.

Writes (AlterClientQuotas, AlterUserScramCredentials through any broker) go to
ZooKeeper with a change notification; every broker, the writer included, re-reads
``/config/users`` and ``/config/clients`` when a notification names a user or client
entity (:class:`~odradek.broker.config_changes.ClusterConfigs` calls ``reload``), so a
user created through broker 1 authenticates on broker 2 and a quota set anywhere
throttles everywhere.
"""

from __future__ import annotations

import asyncio
import logging

from odradek.broker.client_quotas import ClientQuotaManager, entity_key
from odradek.cluster.zk import user_configs
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.errors import ZooKeeperError

log = logging.getLogger(__name__)


class ZkUserStore:
    def __init__(self, zk: ZkClient, manager: ClientQuotaManager) -> None:
        self._zk = zk
        self.manager = manager
        self._scram: dict[str, dict[str, str]] = {}

    async def reload(self) -> None:
        try:
            quotas, scram = await asyncio.to_thread(user_configs.read_all, self._zk)
        except (ZooKeeperError, ValueError) as exc:
            log.error("reading quotas and SCRAM credentials from ZooKeeper failed: %s", exc)
            return
        self.manager.replace({entity_key(e): v for e, v in quotas})
        self._scram = scram

    # Client quotas (the handlers' store interface) -----------------------------------

    async def entities(self) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        quotas, _ = await asyncio.to_thread(user_configs.read_all, self._zk)
        return quotas

    async def set(self, entity: dict[str, str | None], values: dict[str, float]) -> None:
        await asyncio.to_thread(user_configs.write_quotas, self._zk, entity, values)
        self.manager.update(entity_key(entity), values)

    # SCRAM credentials (the metadata store's interface) -------------------------------

    def user_scram_credentials(self) -> dict[str, dict[str, str]]:
        return {user: dict(mechanisms) for user, mechanisms in self._scram.items()}

    def set_user_scram_credentials(self, user: str, mechanisms: dict[str, str]) -> None:
        # A rare administrative write: one ZooKeeper round trip on the event loop.
        user_configs.write_scram(self._zk, user, mechanisms)
        if mechanisms:
            self._scram[user] = dict(mechanisms)
        else:
            self._scram.pop(user, None)
