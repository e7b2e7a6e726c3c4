"""Every reference case in tests/reference/golden, through the in-process core: messages field by field,
index files byte for byte, query answers, and the reading stop."""
from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from refdata import EXTERNAL, expected_files, expected_manifest, golden_params, load_case
from rocketidx.build.in_process import build_index
from rocketidx.commitlog.columns import parse_properties
from rocketidx.commitlog.entries import extract_entry_keys
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BuildConfig
from rocketidx.query.lookup import open_index, query_offsets

TRAN_TYPES = {0: "not", 4: "prepared", 8: "commit", 12: "rollback"}


@pytest.fixture(params=[pytest.param(True, id="native"), pytest.param(False, id="numpy")])
def native(request):
    """Both read paths: the compiled kernel and the numpy reference must agree with RocketMQ."""
    from rocketidx.commitlog.native import native_available
    if request.param and not native_available():
        pytest.skip("rocketidx._native is not built")
    return request.param


def host(addr: bytes, port: int) -> tuple:
    return ipaddress.ip_address(addr), port


def parse_host(text: str) -> tuple:
    a, _, p = text.rpartition(":")
    return ipaddress.ip_address(a.strip("[]")), int(p)


def read_all(case: Path, native: bool):
    reader = CommitLogReader(list_segments(case / "commitlog"), native=native)
    import pyarrow as pa
    table = pa.Table.from_batches(list(reader))
    return table, reader


def config_for(case: Path) -> BuildConfig:
    c = load_case(case)
    return BuildConfig(hash_slot_num=c["hashSlotNum"], index_num=c["indexNum"], window_ms=c["windowMillis"],
                       timezone="UTC")


@pytest.mark.parametrize("case", golden_params())
def test_messages_equal_reference_field_by_field(case, native):
    table, reader = read_all(case, native)
    expected = [json.loads(l) for l in (case / "messages.jsonl").read_text().splitlines() if l.strip()]
    rows = table.to_pylist()
    assert len(rows) == len(expected)
    props = parse_properties(table["properties"].combine_chunks()).to_pylist()
    entry_rows, _, entry_keys = extract_entry_keys(table)
    keys_by_row: dict[int, list[str]] = {}
    for r, k in zip(entry_rows.tolist(), entry_keys.to_pylist()):
        keys_by_row.setdefault(r, []).append(k)
    for i, (got, exp) in enumerate(zip(rows, expected)):
        assert got["phy_offset"] == exp["physicalOffset"]
        assert got["size"] == exp["size"]
        assert got["segment"] == exp["segment"]
        assert got["segment_offset"] == exp["segmentOffset"]
        assert f"v{got['magic_version']}" == exp["magic"]
        assert got["topic"] == exp["topic"]
        assert got["queue_id"] == exp["queueId"]
        assert got["queue_offset"] == exp["queueOffset"]
        assert got["store_timestamp_ms"] == exp["storeTimestamp"]
        assert got["born_timestamp_ms"] == exp["bornTimestamp"]
        assert got["sys_flag"] == exp["sysFlag"]
        assert TRAN_TYPES[got["sys_flag"] & 0xC] == exp["tranType"]
        assert got["flag"] == exp["flag"]
        assert host(got["born_host"], got["born_port"]) == parse_host(exp["bornHost"])
        assert host(got["store_host"], got["store_port"]) == parse_host(exp["storeHost"])
        assert got["reconsume_times"] == exp["reconsumeTimes"]
        assert got["prepared_tx_offset"] == exp["preparedTransactionOffset"]
        assert got["body_length"] == exp["bodyLength"]
        assert got["body_crc"] == exp["bodyCRC"]
        assert got["keys"] == exp["keys"]
        assert got["uniq_key"] == exp["uniqKey"]
        assert got["tags"] == exp["tags"]
        assert dict(props[i]) == exp["properties"]
        assert keys_by_row.get(i, []) == exp["indexKeys"], i


@pytest.mark.parametrize("case", golden_params())
def test_reading_stops_where_the_reference_stops(case, native):
    _, reader = read_all(case, native)
    stop = expected_manifest(case)["parse"]["stop"]
    assert reader.stop.path.endswith(stop["segment"])
    assert reader.stop.segment_offset == stop["segmentOffset"]
    assert reader.stop.phy_offset == stop["physicalOffset"]
    assert reader.stop.final
    assert reader.stop.reason.split(" (")[0] == stop["reason"].split(" (")[0]


@pytest.mark.parametrize("case", golden_params())
def test_index_files_byte_identical_and_queries_answered_alike(case, native, tmp_path):
    manifest, summary = build_index(case / "commitlog", tmp_path / "out", config_for(case), native=native)
    exp = expected_files(case)
    got = [tmp_path / "out" / "index" / f["name"] for f in manifest["files"]]
    assert len(got) == len(exp)
    for e, g in zip(exp, got):
        assert g.read_bytes() == e.read_bytes(), (e.name, g.name)
    ref = expected_manifest(case)
    assert summary.entries == ref["index"]["entries"]
    assert summary.messages == ref["parse"]["recordsParsed"]
    assert summary.rollback_skipped == ref["index"]["rollbackSkipped"]
    assert summary.messages_indexed == ref["index"]["messagesIndexed"]
    assert summary.windows == ref["index"]["windows"]
    for f, e in zip(manifest["files"], ref["files"]):
        assert f["begin_timestamp"] == e["header"]["beginTimestamp"]
        assert f["index_count"] == e["header"]["indexCount"]
        assert f["seq"] == e["seq"]
        assert f["window_start_ms"] == e["windowStart"]
    files = open_index(tmp_path / "out")
    for line in (case / "expected" / "queries.jsonl").read_text().splitlines():
        q = json.loads(line)
        assert query_offsets(files, q["topic"], q["key"], q["begin"], q["end"], q["maxNum"]) == q["offsets"], q


def test_external_rocketmq_rust_store_rebuilds_byte_identical(native, tmp_path):
    store = EXTERNAL / "rocketmq-rust-v0.9.0" / "store"
    manifest, summary = build_index(store, tmp_path / "out",
                                    BuildConfig(hash_slot_num=32, index_num=128, window_ms=0, timezone="UTC"),
                                    native=native)
    expected = sorted((store / "index").iterdir())
    assert len(manifest["files"]) == len(expected) == 1
    got = tmp_path / "out" / "index" / manifest["files"][0]["name"]
    assert got.read_bytes() == expected[0].read_bytes()
    assert summary.messages == 2 and summary.entries == 2
    files = open_index(store / "index", 32, 128)
    assert len(query_offsets(files, "V1UpgradeTopic", "v1-upgrade-key")) == 2
