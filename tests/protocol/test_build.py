import datetime
import io
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from odradek.protocol.build import build_request, build_response, response_class

METADATA = {
    "throttle_time": 7,
    "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
    "cluster_id": "c",
    "controller_id": 1,
    "topics": [
        {
            "name": "t",
            "error_code": 3,
            "topic_id": uuid.UUID(int=5),
            "partitions": [
                {"partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}
            ],
        }
    ],
}


@pytest.mark.parametrize("version", range(0, 13))
def test_one_dict_fits_every_metadata_version(version: int) -> None:
    response = build_response(3, version, METADATA)
    buf = io.BytesIO()
    entity_writer(type(response))(buf, response)
    decoded = entity_reader(type(response))(buf.getvalue(), 0)
    assert decoded[0] == response
    assert response.topics[0].error_code is ErrorCode.unknown_topic_or_partition
    assert response.topics[0].partitions[0].replica_nodes == (1,)
    if hasattr(response, "throttle_time"):
        assert response.throttle_time == datetime.timedelta(milliseconds=7)


def test_misspelled_field_fails_loudly() -> None:
    with pytest.raises(KeyError, match="throttle_time_ms"):
        build_response(3, 5, {"throttle_time_ms": 1})


def test_missing_fields_get_neutral_defaults() -> None:
    response = build_response(3, 12, {})
    assert response.brokers == ()
    assert response.controller_id == 0 or response.controller_id == -1


def test_request_classes_too() -> None:
    request = build_request(19, 5, {"topics": [{"name": "x", "num_partitions": 1}], "timeout": 5})
    assert request.topics[0].name == "x"
    assert request.timeout == datetime.timedelta(milliseconds=5)
    assert response_class(19, 5).__name__ == "CreateTopicsResponse"
