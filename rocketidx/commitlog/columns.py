"""Records -> message columns: the :data:`MESSAGE_SCHEMA` batch of a segment's records.

In: a segment's bytes and its records array (:mod:`rocketidx.commitlog.records`). Out: one Arrow
column per message field (topic, keys, properties, offsets, times, hosts, body position).
Stays true: every field is gathered with numpy at the records' offsets, and the properties are parsed
in bulk with pyarrow compute (no Python loop per message).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
# pyarrow.compute is imported by the functions that use it: its import takes 40 ms, which a command that never
# calls them (an incremental index build, a query) does not pay.

from rocketidx.arrays import binary_array, gather_ranges
from rocketidx.commitlog.records import gather_at
from rocketidx.commitlog.segments import Segment
import rocketidx.layout as L


MESSAGE_SCHEMA = pa.schema([
    ("phy_offset", pa.int64()),  # the stored PHYSICALOFFSET field
    ("size", pa.int32()),
    ("segment", pa.string()),
    ("segment_offset", pa.int64()),
    ("magic_version", pa.int8()),  # 1 or 2
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("store_timestamp_ms", pa.int64()),
    ("born_timestamp_ms", pa.int64()),
    ("sys_flag", pa.int32()),
    ("flag", pa.int32()),
    ("born_host", pa.binary()),  # 4 (IPv4) or 16 (IPv6) address bytes
    ("born_port", pa.int32()),
    ("store_host", pa.binary()),
    ("store_port", pa.int32()),
    ("reconsume_times", pa.int32()),
    ("prepared_tx_offset", pa.int64()),
    ("body_length", pa.int32()),
    ("body_crc", pa.int32()),
    ("keys", pa.string()),  # raw KEYS property, null when absent
    ("uniq_key", pa.string()),
    ("tags", pa.string()),
    ("properties", pa.string()),  # the raw properties string, decoded as Java decodes UTF-8
])


def _binary(data: np.ndarray, offsets: np.ndarray) -> pa.BinaryArray:
    return binary_array(data, offsets)


def decode_java_utf8(arr: pa.BinaryArray) -> pa.StringArray:
    """Bytes -> strings as Java's ``new String(bytes, UTF_8)`` does: malformed input becomes U+FFFD.

    Valid input is a zero-copy cast; only a batch holding malformed bytes is decoded row by row with
    :func:`rocketidx.commitlog.keys.java_utf8_decode`, which follows the JDK's replacement rules.
    """
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        from rocketidx.commitlog.keys import java_utf8_decode
        return pa.array([None if b is None else java_utf8_decode(b) for b in arr.to_pylist()], pa.string())


def parse_properties(props: pa.StringArray) -> pa.MapArray:
    """Every property as a map, names sorted, as ``MessageDecoder.string2messageProperties`` parses."""
    import pyarrow.compute as pc
    pieces = pc.split_pattern(props, L.PROPERTY_SEPARATOR)
    parent = pc.list_parent_indices(pieces)
    flat = pc.list_flatten(pieces)
    kv = pc.split_pattern(flat, L.NAME_VALUE_SEPARATOR, max_splits=1)
    ok = pc.and_(pc.equal(pc.list_value_length(kv), 2), pa.array(np.ones(len(kv), bool)))
    name = pc.list_element(pc.filter(kv, ok), 0)
    value = pc.list_element(pc.filter(kv, ok), 1)
    parent = pc.filter(parent, ok)
    keep = pc.and_(pc.greater(pc.binary_length(name), 0), pc.greater(pc.binary_length(value), 0))
    t = pa.table({"row": pc.filter(parent, keep), "name": pc.filter(name, keep),
                  "value": pc.filter(value, keep), "pos": pa.array(np.arange(pc.sum(keep).as_py() or 0))})
    # Later duplicate wins: keep the highest position per (row, name).
    last = t.group_by(["row", "name"], use_threads=False).aggregate([("pos", "max")])
    t = t.take(last["pos_max"]).sort_by([("row", "ascending"), ("name", "ascending")])
    counts = np.bincount(t["row"].to_numpy(), minlength=len(props)) if t.num_rows else np.zeros(len(props), np.int64)
    offsets = np.zeros(len(props) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), t["name"].combine_chunks(), t["value"].combine_chunks(),
                                   mask=props.is_null())


def _hosts(u8: np.ndarray, pos: np.ndarray, v6: np.ndarray) -> tuple[pa.BinaryArray, np.ndarray]:
    addr_len = np.where(v6, 16, 4)
    data, offs = gather_ranges(u8, pos, addr_len)
    port = gather_at(u8, pos + addr_len, np.dtype(">i4")).astype(np.int32)
    return _binary(data, offs), port


def _strings(u8: np.ndarray, recs: np.ndarray, pos_col: int, len_col: int) -> pa.StringArray:
    lengths = recs[:, len_col]
    found = lengths >= 0
    d, o = gather_ranges(u8, recs[:, pos_col], np.maximum(lengths, 0))
    return decode_java_utf8(binary_array(d, o, found))


def records_to_batch(buf, seg: Segment, recs: np.ndarray) -> pa.RecordBatch:
    """Message columns of the records (:data:`MESSAGE_SCHEMA`)."""
    u8 = np.frombuffer(buf, np.uint8, seg.size)
    P = recs[:, L.REC_POS]
    n = len(P)
    pre = gather_at(u8, P, L.RECORD_PREFIX)
    sys_flag = recs[:, L.REC_SYSFLAG]
    born_v6 = (sys_flag & L.SYSFLAG_BORNHOST_V6) != 0
    store_v6 = (sys_flag & L.SYSFLAG_STOREHOST_V6) != 0
    born_pos = P + L.RECORD_PREFIX.itemsize
    store_ts_pos = born_pos + np.where(born_v6, L.IPV6_HOST_BYTES, L.IPV4_HOST_BYTES)
    store_pos = store_ts_pos + L.STORE_TIMESTAMP_BYTES
    after_pos = store_pos + np.where(store_v6, L.IPV6_HOST_BYTES, L.IPV4_HOST_BYTES)
    after = gather_at(u8, after_pos, L.RECORD_AFTER_HOSTS)
    born_host, born_port = _hosts(u8, born_pos, born_v6)
    store_host, store_port = _hosts(u8, store_pos, store_v6)
    store_ts = recs[:, L.REC_STORE_TS]
    segment = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([seg.name])).cast(pa.string())
    return pa.RecordBatch.from_arrays([
        pa.array(recs[:, L.REC_PHY]),
        pa.array(recs[:, L.REC_TOTAL].astype(np.int32)),
        segment,
        pa.array(P.astype(np.int64)),
        pa.array(np.where(recs[:, L.REC_V2] != 0, 2, 1).astype(np.int8)),
        _strings(u8, recs, L.REC_TOPIC_POS, L.REC_TOPIC_LEN),
        pa.array(pre["queue_id"].astype(np.int32)),
        pa.array(pre["queue_offset"].astype(np.int64)),
        pa.array(store_ts),
        pa.array(pre["born_timestamp_ms"].astype(np.int64)),
        pa.array(sys_flag.astype(np.int32)),
        pa.array(pre["flag"].astype(np.int32)),
        born_host, pa.array(born_port),
        store_host, pa.array(store_port),
        pa.array(after["reconsume_times"].astype(np.int32)),
        pa.array(after["prepared_tx_offset"].astype(np.int64)),
        pa.array(recs[:, L.REC_BODY_LEN].astype(np.int32)),
        pa.array(pre["body_crc"].astype(np.int32)),
        _strings(u8, recs, L.REC_KEYS_POS, L.REC_KEYS_LEN),
        _strings(u8, recs, L.REC_UNIQ_POS, L.REC_UNIQ_LEN),
        _strings(u8, recs, L.REC_TAGS_POS, L.REC_TAGS_LEN),
        _strings(u8, recs, L.REC_PROPS_POS, L.REC_PROPS_LEN),
    ], schema=MESSAGE_SCHEMA)
