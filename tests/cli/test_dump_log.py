"""``odradek dump-log``: Kafka's DumpLogSegments output for files odradek's storage writes."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.broker.group.offsets_records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from odradek.records import Compression, Record, build_batch, build_end_txn_marker
from odradek.records.control import ControlType
from odradek.storage.leader_epoch import format_epoch_checkpoint
from odradek.storage.offset_index import OffsetIndex
from odradek.storage.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    encode_snapshot,
)
from odradek.storage.time_index import TimeIndex
from odradek.storage.txn_index import AbortedTxn
from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

BASE = 100
NAME = f"{BASE:020d}"
T0 = 1_700_000_000_000


def write_segment(directory: Path) -> tuple[Path, list[bytearray]]:
    """Three batches: plain, gzip with keys and headers, and a transaction COMMIT marker."""
    first = build_batch(
        [Record(b"v0", None, (), T0), Record(b"v1", b"k1", (), T0 + 1)],
        base_offset=BASE,
        partition_leader_epoch=3,
    )
    second = build_batch(
        [Record(b"hello", b"key", [("h1", b"x"), ("h2", None)], T0 + 5)],
        base_offset=BASE + 2,
        compression=Compression.GZIP,
        producer_id=7,
        producer_epoch=1,
        base_sequence=10,
        partition_leader_epoch=3,
    )
    marker = build_end_txn_marker(
        ControlType.COMMIT,
        producer_id=7,
        producer_epoch=1,
        coordinator_epoch=4,
        base_offset=BASE + 3,
        partition_leader_epoch=3,
        timestamp_ms=T0 + 9,
    )
    path = directory / f"{NAME}.log"
    path.write_bytes(bytes(first + second + marker))
    return path, [first, second, marker]


def dump(*args: str):  # type: ignore[no-untyped-def]
    return odradek("dump-log", *args)


def test_batches_shallow(tmp_path: Path) -> None:
    log, batches = write_segment(tmp_path)
    result = dump("--files", str(log)).check()
    lines = result.lines
    assert lines[0] == f"Dumping {log}"
    assert lines[1] == f"Log starting offset: {BASE}"
    assert len(lines) == 5
    crc = int.from_bytes(batches[0][17:21], "big")
    assert lines[2] == (
        f"baseOffset: 100 lastOffset: 101 count: 2 baseSequence: -1 lastSequence: -1 "
        f"producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false "
        f"isControl: false deleteHorizonMs: OptionalLong.empty position: 0 "
        f"CreateTime: {T0 + 1} size: {len(batches[0])} magic: 2 compresscodec: none "
        f"crc: {crc} isvalid: true"
    )
    assert f"position: {len(batches[0])} " in lines[3]
    assert "compresscodec: gzip" in lines[3]
    assert "baseSequence: 10 lastSequence: 10 producerId: 7 producerEpoch: 1" in lines[3]
    assert "isTransactional: true isControl: true" in lines[4]
    assert "Found" not in result.out


def test_deep_iteration_and_data(tmp_path: Path) -> None:
    log, _ = write_segment(tmp_path)
    lines = dump("--files", str(log), "--deep-iteration").check().lines
    records = [line for line in lines if line.startswith("| ")]
    assert records == [
        f"| offset: 100 CreateTime: {T0} keySize: -1 valueSize: 2 sequence: -1 headerKeys: []",
        f"| offset: 101 CreateTime: {T0 + 1} keySize: 2 valueSize: 2 sequence: -1 headerKeys: []",
        f"| offset: 102 CreateTime: {T0 + 5} keySize: 3 valueSize: 5 sequence: 10 "
        "headerKeys: [h1,h2]",
        f"| offset: 103 CreateTime: {T0 + 9} keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 4",
    ]
    data = dump("--files", str(log), "--print-data-log").check().lines
    records = [line for line in data if line.startswith("| ")]
    assert records[0].endswith("headerKeys: [] payload: v0")
    assert records[1].endswith("headerKeys: [] key: k1 payload: v1")
    assert records[2].endswith("headerKeys: [h1,h2] key: key payload: hello")
    assert records[3].endswith("coordinatorEpoch: 4")  # no data printed for a marker
    bare = dump("--files", str(log), "--print-data-log", "--skip-record-metadata").check()
    # Kafka's quirk, kept: without metadata or key, the line starts with " payload:".
    assert bare.lines[3:5] == [" payload: v0", "| key: k1 payload: v1"]


def test_max_bytes_and_trailing_bytes(tmp_path: Path) -> None:
    log, batches = write_segment(tmp_path)
    limited = dump("--files", str(log), "--max-bytes", str(len(batches[0]) + 10)).check()
    assert sum(line.startswith("baseOffset:") for line in limited.lines) == 1
    assert "invalid bytes" not in limited.out  # a cut made by --max-bytes is not reported
    with open(log, "ab") as f:
        f.write(b"\x00" * 7)
    torn = dump("--files", str(log)).check()
    assert torn.lines[-1] == f"Found 7 invalid bytes at the end of {log.name}"


def test_corrupt_segment_prints_what_it_can(tmp_path: Path) -> None:
    log, batches = write_segment(tmp_path)
    data = bytearray(log.read_bytes())
    second = len(batches[0])
    data[second + 8 : second + 12] = (5).to_bytes(4, "big")  # impossible batchLength
    log.write_bytes(bytes(data))
    result = dump("--files", str(log), "--deep-iteration").check_error(str(log), "batchLength")
    assert sum(line.startswith("baseOffset:") for line in result.lines) == 1
    assert sum(line.startswith("| offset:") for line in result.lines) == 2


def test_crc_failure_is_reported_as_invalid(tmp_path: Path) -> None:
    log, batches = write_segment(tmp_path)
    data = bytearray(log.read_bytes())
    data[len(batches[0]) - 1] ^= 0xFF  # last byte of the first batch's last record
    log.write_bytes(bytes(data))
    lines = dump("--files", str(log)).check().lines
    assert lines[2].endswith("isvalid: false")
    assert lines[3].endswith("isvalid: true")


def test_indexes_checked_against_the_log(tmp_path: Path) -> None:
    _, batches = write_segment(tmp_path)
    index = OffsetIndex(tmp_path / f"{NAME}.index", BASE, 1 << 20)
    index.append(BASE + 2, len(batches[0]))
    index.append(BASE + 3, len(batches[0]) + 1)  # points into the middle of a batch
    index.close()
    time_index = TimeIndex(tmp_path / f"{NAME}.timeindex", BASE, 1 << 20)
    time_index.maybe_append(T0 + 1, BASE + 1)
    time_index.maybe_append(T0 + 4, BASE + 2)  # the batch's max timestamp is T0 + 5
    time_index.close()
    result = dump("--files", f"{tmp_path / NAME}.index,{tmp_path / NAME}.timeindex").check()
    assert result.lines[1:3] == [
        f"offset: {BASE + 2} position: {len(batches[0])}",
        f"offset: {BASE + 3} position: {len(batches[0]) + 1}",
    ]
    assert result.lines[4:] == [
        f"timestamp: {T0 + 1} offset: 101",
        f"timestamp: {T0 + 4} offset: 102",
    ]
    assert f"Mismatches in :{tmp_path / NAME}.index" in result.stderr
    assert f"  Index offset: {BASE + 3}, log offset: -1" in result.stderr
    assert f"  Index timestamp: {T0 + 4}, log timestamp: {T0 + 5}" in result.stderr
    sanity = dump("--files", f"{tmp_path / NAME}.index", "--index-sanity-check").check()
    assert sanity.lines[1] == f"{tmp_path / NAME}.index passed sanity check."
    verify = dump("--files", f"{tmp_path / NAME}.index", "--verify-index-only").check()
    assert verify.lines == [f"Dumping {tmp_path / NAME}.index"]
    assert "Index offset: 103" in verify.stderr


def test_torn_index(tmp_path: Path) -> None:
    path = tmp_path / f"{NAME}.index"
    path.write_bytes((1).to_bytes(4, "big") + (50).to_bytes(4, "big") + b"\x01\x02\x03")
    result = dump("--files", str(path)).check_error("3 trailing bytes")
    assert result.lines[1] == f"offset: {BASE + 1} position: 50"
    dump("--files", str(path), "--index-sanity-check").check_error("not a multiple")
    empty = tmp_path / f"{0:020d}.index"
    empty.write_bytes(b"")
    assert dump("--files", str(empty)).check().lines[1] == f"{empty} is empty."


def test_producer_snapshot_txn_index_and_epochs(tmp_path: Path) -> None:
    entry = ProducerStateEntry(42, 3, 5, T0, 17)
    entry.batches.append(BatchMetadata(0, 4, 10, 14, T0 - 1))
    entry.batches.append(BatchMetadata(5, 9, 15, 19, T0))
    idle = ProducerStateEntry(43, 0, -1, T0 + 2, None)
    snapshot = tmp_path / f"{20:020d}.snapshot"
    snapshot.write_bytes(encode_snapshot([entry, idle]))
    txn = tmp_path / f"{NAME}.txnindex"
    txn.write_bytes(AbortedTxn(42, 10, 20, 21).pack() + AbortedTxn(44, 30, 31, 40).pack())
    epochs = tmp_path / "leader-epoch-checkpoint"
    epochs.write_bytes(format_epoch_checkpoint([(0, 0), (3, 100)]))
    result = dump("--files", f"{snapshot},{txn},{epochs}").check()
    assert result.lines == [
        f"Dumping {snapshot}",
        "producerId: 42 producerEpoch: 3 coordinatorEpoch: 5 currentTxnFirstOffset: "
        f"OptionalLong[17] lastTimestamp: {T0} firstSequence: 0 lastSequence: 4 "
        f"lastOffset: 14 offsetDelta: 4 timestamp: {T0 - 1}",
        "producerId: 43 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {T0 + 2} ",
        f"Dumping {txn}",
        "version: 0 producerId: 42 firstOffset: 10 lastOffset: 20 lastStableOffset: 21",
        "version: 0 producerId: 44 firstOffset: 30 lastOffset: 31 lastStableOffset: 40",
        f"Dumping {epochs}",
        "epoch: 0 startOffset: 0",
        "epoch: 3 startOffset: 100",
    ]
    snapshot.write_bytes(snapshot.read_bytes()[:-3])
    dump("--files", str(snapshot)).check_error("CRC32C mismatch")
    epochs.write_text("0\n5\n1 2\n")
    dump("--files", str(epochs)).check_error("header says 5 entries")


def test_unknown_missing_and_usage(tmp_path: Path) -> None:
    other = tmp_path / "partition.metadata"
    other.write_text("version: 0\n")
    result = dump("--files", str(other)).check()
    assert f"Ignoring unknown file {other}" in result.stderr
    dump("--files", str(tmp_path / f"{NAME}.log")).check_error("No such file")
    assert dump().code == 2  # --files is required


def test_offsets_decoder_on_a_live_broker_log(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={"offsets.topic.num.partitions": "1"})
    broker.start()
    try:
        topic = f"dump-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, b"x")
        producer.flush(20)
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "dumped",
                "enable.auto.commit": False,
            }
        )
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        consumer.close()
    finally:
        broker.stop()
    log = tmp_path / "data" / "__consumer_offsets-0" / f"{0:020d}.log"
    lines = dump("--files", str(log), "--offsets-decoder").check().lines
    commits = [line for line in lines if '"topic":"' + topic + '"' in line]
    assert len(commits) == 1
    match = re.search(r"key: (\{.*\}) payload: (\{.*\})$", commits[0])
    assert match, commits[0]
    assert match.group(1) == (
        '{"type":"1","data":{"group":"dumped","topic":"' + topic + '","partition":0}}'
    )
    assert match.group(2).startswith('{"version":"3","data":{"offset":1,"leaderEpoch":')
    assert '"metadata":"","commitTimestamp":' in match.group(2)


def test_offsets_decoder_record_kinds(tmp_path: Path) -> None:
    member = MemberMetadataValue(
        member_id="m-1",
        client_id="c",
        client_host="/127.0.0.1",
        rebalance_timeout=300,
        session_timeout=45,
        subscription=b"\x00\x01",
        assignment=b"",
        group_instance_id=None,
    )
    group = GroupMetadataValue("consumer", 4, "range", "m-1", (member,), T0)
    records = [
        Record(encode_group_metadata_value(group), encode_group_metadata_key("g"), (), T0),
        Record(
            encode_offset_commit_value(OffsetCommitValue(5, "meta", T0, expire_timestamp=T0 + 1)),
            encode_offset_commit_key("g", "t", 2),
            (),
            T0,
        ),
        Record(None, encode_offset_commit_key("g", "t", 3), (), T0),  # tombstone
        Record(b"", (9).to_bytes(2, "big") + b"xx", (), T0),  # a KIP-848 record type
        Record(b"\x00", (1).to_bytes(2, "big"), (), T0),  # truncated key
        Record(b"v", None, (), T0),
    ]
    log = tmp_path / f"{0:020d}.log"
    log.write_bytes(bytes(build_batch(records)))
    lines = dump("--files", str(log), "--offsets-decoder", "--skip-record-metadata").check().lines
    assert lines[3:] == [
        '| key: {"type":"2","data":{"group":"g"}} payload: {"version":"3","data":'
        '{"protocolType":"consumer","generation":4,"protocol":"range","leader":"m-1",'
        f'"currentStateTimestamp":{T0},"members":[{{"memberId":"m-1","groupInstanceId":null,'
        '"clientId":"c","clientHost":"/127.0.0.1","rebalanceTimeout":300,"sessionTimeout":45,'
        '"subscription":"AAE=","assignment":""}]}}',
        '| key: {"type":"1","data":{"group":"g","topic":"t","partition":2}} payload: '
        f'{{"version":"1","data":{{"offset":5,"metadata":"meta","commitTimestamp":{T0},'
        f'"expireTimestamp":{T0 + 1}}}}}',
        '| key: {"type":"1","data":{"group":"g","topic":"t","partition":3}} payload: <DELETE>',
        "| key: Unknown record type 9 at offset 3, skipping.",
        lines[7],
        "| key: Failed to decode message at offset 5 using offset topic decoder "
        "(message had a missing key)",
    ]
    assert lines[7].startswith("| key: Error at offset 4, skipping. ")


def test_index_entries_past_an_empty_log(tmp_path: Path) -> None:
    (tmp_path / f"{NAME}.log").write_bytes(b"")
    index = OffsetIndex(tmp_path / f"{NAME}.index", BASE, 1 << 20)
    index.append(BASE + 5, 4096)
    index.close()
    time_index = TimeIndex(tmp_path / f"{NAME}.timeindex", BASE, 1 << 20)
    time_index.maybe_append(T0, BASE + 5)
    time_index.close()
    result = dump("--files", f"{tmp_path / NAME}.index,{tmp_path / NAME}.timeindex").check()
    assert f"  Index offset: {BASE + 5}, log offset: -1" in result.stderr
    assert "The following indexed offsets are not found in the log." in result.stderr
    assert f"Indexed offset: {BASE + 5}, found log offset: -1" in result.stderr
