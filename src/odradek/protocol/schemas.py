"""Where the entity class of an (API key, version) comes from.

Every API is a kio class except the ZooKeeper-era inter-broker RPCs (LeaderAndIsr,
StopReplica, UpdateMetadata, ControlledShutdown), which kio 0.6.5 no longer has and
:mod:`odradek.protocol.interbroker` makes in kio's shape. The codec, the builder and the
error responses look classes up here so those four APIs travel like any other.
"""

from __future__ import annotations

from functools import cache

from kio.index import load_request_schema, load_response_schema

from odradek.protocol import interbroker

__all__ = ["request_type", "response_type"]


@cache
def request_type(api_key: int, api_version: int) -> type:
    """The request entity class; LookupError/KeyError-like failures from kio otherwise."""
    if api_key in interbroker.INTERBROKER_VERSIONS:
        return interbroker.request_class(api_key, api_version)
    return load_request_schema(api_key, api_version)


@cache
def response_type(api_key: int, api_version: int) -> type:
    if api_key in interbroker.INTERBROKER_VERSIONS:
        return interbroker.response_class(api_key, api_version)
    return load_response_schema(api_key, api_version)
