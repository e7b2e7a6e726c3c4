"""The RocksDB consume queue: a 5.2+ broker's queues with ``storeType=defaultRocksDB`` (RIP-66).

In: a database directory (``STORE/consumequeue/``), or the log itself. Out: a
:class:`QueueTable`, what a database holds or should hold, and a new database written from one.

The layout (``RocksDBConsumeQueueTable``, ``RocksDBConsumeQueueOffsetTable``; docs/formats.md, "The RocksDB
consume queue"), all integers big-endian:

* column family ``default``, one key per entry: topic length 4 | 0x01 | topic (UTF-8) | 0x01 | queueId 4 |
  0x01 | queue offset 8 -> physical offset 8 | size 4 | tagsCode 8 | store time 8 (28 bytes);
* column family ``offset``: per queue, topic length 4 | 0x01 | topic | 0x01 | ``max`` or ``min`` | 0x01 |
  queueId 4 -> physical offset 8 | queue offset 8 of the queue's last (``max``) or first served (``min``)
  entry; and the key of topic ``CHECKPOINT_TOPIC``, ``max``, queue 0 -> 8 bytes: the end (offset + size) of
  the newest record dispatched, from which a restart dispatches again.

Stays true: a ``min`` key is the broker's cache of where a queue starts, written when it is first asked
(``correctMinCqOffset``) and corrected whenever the log's start passes it; a rebuild writes none and the
broker computes each again. The entries are those the ConsumeQueue files would take, with the record's store
time added (the same dispatch: ``CommitLogDispatcherBuildConsumeQueue``), each at its record's queue offset.

The database is read and written through ``rocksdict`` (RocksDB's maintained Python binding on PyPI: wheels
for Linux, macOS and Windows with LZ4 and ZSTD built in, read-only opening, column families, and the
table options a broker sets). It is imported only here, when a RocksDB store is met.
"""
from __future__ import annotations

import os
import re
import struct
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import rocketidx.layout as L
from rocketidx.arrays import queue_groups
from rocketidx.errors import StoreLayoutError

CTRL_1 = b"\x01"
OFFSET_CF = "offset"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"  # TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC
VALUE = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"), ("store_ts", ">i8")])
OFFSET_VALUE = np.dtype([("phy_offset", ">i8"), ("queue_offset", ">i8")])
ENTRY = np.dtype([("queue_offset", "i8"), ("phy_offset", "i8"), ("size", "i4"), ("tags_code", "i8"),
                  ("store_ts", "i8")])


def entry_key(topic: bytes, queue_id: int, queue_offset: int) -> bytes:
    return struct.pack(">i", len(topic)) + CTRL_1 + topic + CTRL_1 + struct.pack(">i", queue_id) + CTRL_1 + \
        struct.pack(">q", queue_offset)


def offset_key(topic: bytes, queue_id: int, kind: str) -> bytes:
    return struct.pack(">i", len(topic)) + CTRL_1 + topic + CTRL_1 + kind.encode() + CTRL_1 + \
        struct.pack(">i", queue_id)


CHECKPOINT_KEY = offset_key(CHECKPOINT_TOPIC.encode(), 0, "max")


def _split_entry_key(key: bytes) -> tuple[str, int, int] | None:
    """(topic, queueId, queue offset) of a ``default`` key; None where it is not one."""
    if len(key) < 19:
        return None
    n = struct.unpack_from(">i", key)[0]
    if n < 0 or len(key) != 4 + 1 + n + 1 + 4 + 1 + 8 or key[4:5] != CTRL_1 or key[5 + n:6 + n] != CTRL_1 \
            or key[10 + n:11 + n] != CTRL_1:
        return None
    qid, off = struct.unpack_from(">iq", key, 6 + n)[0], struct.unpack_from(">q", key, 11 + n)[0]
    return key[5:5 + n].decode("utf-8", "replace"), qid, off


def _split_offset_key(key: bytes) -> tuple[str, str, int] | None:
    """(topic, ``max`` or ``min``, queueId) of an ``offset`` key; None where it is not one."""
    if len(key) < 14:
        return None
    n = struct.unpack_from(">i", key)[0]
    if n < 0 or len(key) != 4 + 1 + n + 1 + 3 + 1 + 4 or key[4:5] != CTRL_1 or key[5 + n:6 + n] != CTRL_1:
        return None
    kind = key[6 + n:9 + n].decode("ascii", "replace")
    if kind not in ("max", "min") or key[9 + n:10 + n] != CTRL_1:
        return None
    return key[5:5 + n].decode("utf-8", "replace"), kind, struct.unpack_from(">i", key, 10 + n)[0]


@dataclass
class QueueTable:
    """What a RocksDB consume queue holds (or, made by :func:`expected_table`, should hold)."""
    entries: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)  # ENTRY rows, by queue offset
    max: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # (phy offset, queue offset)
    min: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    checkpoint: int | None = None  # CHECKPOINT_TOPIC's value; None: no such key
    malformed: list[tuple[str, bytes, str]] = field(default_factory=list)  # (family, key, why)

    @property
    def entry_count(self) -> int:
        return sum(len(e) for e in self.entries.values())

    def newest_store_time(self) -> int | None:
        """The store time of the entry at the highest CommitLog offset (the logicsMsgTimestamp a broker that
        dispatched it would have); None without an entry."""
        tops = [a[np.argmax(a["phy_offset"])] for a in self.entries.values() if len(a)]
        return int(max(tops, key=lambda e: e["phy_offset"])["store_ts"]) if tops else None


def _rocksdict():
    try:
        import rocksdict
    except ImportError as e:  # a dependency of the package; a bare environment may lack it
        raise StoreLayoutError("rocksdict", "reading a RocksDB consume queue needs the rocksdict package "
                                            "(pip install rocksdict)") from e
    return rocksdict


def is_rocksdb(directory: str | os.PathLike) -> bool:
    """A RocksDB database directory: a ``CURRENT`` file and a MANIFEST or a table file beside it."""
    d = Path(directory)
    if not d.is_dir():
        return False
    names = os.listdir(d)
    return "CURRENT" in names and any(n.startswith("MANIFEST-") or n.endswith(".sst") for n in names)


def read_table(directory: str | os.PathLike) -> QueueTable:
    """Everything a stopped broker's database holds, opened read-only (nothing in it is written, no lock
    taken: RocksDB's read-only mode). A key or value of another shape is kept in ``malformed``, named."""
    rd = _rocksdict()
    with tempfile.TemporaryDirectory(prefix="rocketidx-rocksdb-") as shadow:
        # absolute: the links are made in another directory, and a relative target would resolve from there
        return _read_table(rd, _shadow(Path(directory).resolve(), Path(shadow)), str(directory))


_DATA_FILE = re.compile(r"^(CURRENT|IDENTITY|MANIFEST-\d+|OPTIONS-\d+|\d+\.(sst|log|blob))$")


def _shadow(db: Path, shadow: Path) -> str:
    """A directory of links to ``db``'s data files, where the binding opens it. rocksdict writes a settings
    file (``rocksdict-config.json``) into any database it opens, read-only too, and RocksDB its info ``LOG``:
    both land here, never in the broker's store. A read-only open writes nothing through the links."""
    for name in os.listdir(db):
        if _DATA_FILE.match(name):
            os.symlink(db / name, shadow / name)
    return str(shadow)


def _read_table(rd, path: str, named: str) -> QueueTable:
    try:
        families = rd.Rdict.list_cf(path)
        opts = {n: rd.Options(raw_mode=True) for n in families}
        db = rd.Rdict(path, options=rd.Options(raw_mode=True), access_type=rd.AccessType.read_only(),
                      column_families=opts)
    except Exception as e:  # rocksdict raises plain Exceptions carrying RocksDB's status
        raise StoreLayoutError(named, f"not a RocksDB database rocketidx can open read-only: {e}") from e
    out = QueueTable()
    rows: dict[tuple[str, int], list] = defaultdict(list)
    try:
        for key, value in db.items():
            k = _split_entry_key(key)
            if k is None or len(value) != VALUE.itemsize:
                out.malformed.append(("default", key, "not a queue entry's key" if k is None
                                      else f"a value of {len(value)} bytes, not {VALUE.itemsize}"))
                continue
            v = np.frombuffer(value, VALUE)[0]
            rows[k[:2]].append((k[2], int(v["phy_offset"]), int(v["size"]), int(v["tags_code"]),
                                int(v["store_ts"])))
        if OFFSET_CF in families:
            for key, value in db.get_column_family(OFFSET_CF).items():
                if key == CHECKPOINT_KEY and len(value) == 8:
                    out.checkpoint = struct.unpack(">q", value)[0]
                    continue
                k = _split_offset_key(key)
                if k is None or len(value) != OFFSET_VALUE.itemsize:
                    out.malformed.append((OFFSET_CF, key, "not a queue's max or min key" if k is None
                                          else f"a value of {len(value)} bytes, not 16"))
                    continue
                (out.max if k[1] == "max" else out.min)[(k[0], k[2])] = struct.unpack(">qq", value)
    finally:
        db.close()
    for q, r in rows.items():
        a = np.array(r, ENTRY)
        out.entries[q] = a[np.argsort(a["queue_offset"], kind="stable")]
    return out


class RocksQueues:
    """A RocksDB consume queue as a restarted broker serves it (``RocksDBConsumeQueue.get``), for ``query
    --consumequeue``: an entry between the queue's first served offset (its first entry at or past the log's
    first offset ``min_offset``) and its ``max`` key, else None. The table is read whole when opened."""

    def __init__(self, directory: str | os.PathLike, min_offset: int):
        self.table, self.min_offset = read_table(directory), min_offset

    def get(self, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int] | None:
        a, top = self.table.entries.get((topic, queue_id)), self.table.max.get((topic, queue_id))
        if a is None or top is None or queue_offset > top[1]:
            return None
        i = int(np.searchsorted(a["queue_offset"], queue_offset))
        if i == len(a) or a["queue_offset"][i] != queue_offset or a["phy_offset"][i] < self.min_offset:
            return None
        return int(a["phy_offset"][i]), int(a["size"][i]), int(a["tags_code"][i])


def dispatched_table(commitlog: str | os.PathLike, *, delays_ms: tuple[int, ...] | None = None,
                     check_crc: bool = True, light_queues=None) -> QueueTable:
    """The database a broker that dispatched the whole log holds (``RocksDBConsumeQueueStore.putMessagePosition``):
    one key per entry the dispatch makes (:func:`rocketidx.commitlog.dispatch.dispatch`, the records that make
    ConsumeQueue entries and, with ``light_queues``, their light-queue units), at the record's own queue
    offset, a later put of a key replacing an earlier one; per queue the ``max`` of its newest entry in log
    order; the checkpoint at the end of the newest entry's record. Unlike a ConsumeQueue file, nothing is
    placed: a queue offset skipped is a key absent, not a slot shifted."""
    from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS, dispatch
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    out = QueueTable()
    parts: dict[tuple[str, int], list[np.ndarray]] = defaultdict(list)
    reader = CommitLogReader(list_segments(str(commitlog)), check_crc=check_crc)
    for seg, buf, recs in reader.record_chunks():
        d = dispatch(buf, seg, recs, delays_ms or DEFAULT_DELAYS_MS, light_queues)
        if not len(d):
            continue
        rows = np.zeros(len(d), ENTRY)
        rows["queue_offset"], rows["phy_offset"], rows["size"] = d.queue_offset, d.phy_offset, d.size
        rows["tags_code"] = d.tags_code
        rows["store_ts"] = recs[np.searchsorted(recs[:, L.REC_POS], d.position), L.REC_STORE_TS]
        end = int((d.phy_offset.astype(np.int64) + d.size).max())
        out.checkpoint = end if out.checkpoint is None else max(out.checkpoint, end)
        for idx in queue_groups(d.topic_index, d.queue_id):
            first = int(idx[0])
            parts[(d.topics[int(d.topic_index[first])], int(d.queue_id[first]))].append(rows[idx])
    for q, chunks in parts.items():
        a = np.concatenate(chunks)
        out.max[q] = (int(a["phy_offset"][-1]), int(a["queue_offset"][-1]))
        # the last put of each key stays: unique over the reversed rows keeps each offset's last occurrence
        _, last = np.unique(a["queue_offset"][::-1], return_index=True)
        out.entries[q] = a[len(a) - 1 - last]
    return out


def write_table(directory: str | os.PathLike, table: QueueTable, *, compression: str = "lz4",
                bottommost: str = "zstd") -> None:
    """A new database at ``directory`` (which must not exist) holding ``table``'s entries, max keys and
    checkpoint, flushed to table files and closed. The table options are the broker's
    (``RocksDBOptionsFactory``: block-based format version 5, 32 KiB blocks, a 16-bit Bloom filter; the
    entries compressed as ``rocksdbCompressionType`` (LZ4) and ``bottomMostCompressionTypeForConsumeQueueStore``
    (ZSTD) say, the offsets not), so that releases from 5.2.0 (RocksDB 8) on open what a newer RocksDB wrote."""
    rd = _rocksdict()
    path = str(directory)
    if os.path.exists(path):
        raise StoreLayoutError(path, "a new RocksDB consume queue is written into a fresh directory only")
    codec = {"lz4": rd.DBCompressionType.lz4(), "zstd": rd.DBCompressionType.zstd(),
             "none": rd.DBCompressionType.none(), "snappy": rd.DBCompressionType.snappy()}
    options = {}
    for name, comp, bottom in (("default", compression, bottommost), (OFFSET_CF, "none", None)):
        o = rd.Options(raw_mode=True)
        t = rd.BlockBasedOptions()
        t.set_format_version(5)
        t.set_block_size(32 * 1024)
        t.set_bloom_filter(16, False)
        o.set_block_based_table_factory(t)
        o.set_compression_type(codec[comp])
        if bottom:
            o.set_bottommost_compression_type(codec[bottom])
        options[name] = o
    db_opts = rd.Options(raw_mode=True)
    db_opts.create_if_missing(True)
    db_opts.create_missing_column_families(True)
    db = rd.Rdict(path, options=db_opts, column_families=options)
    try:
        offsets = db.get_column_family(OFFSET_CF)
        for (topic, qid), a in table.entries.items():
            t = topic.encode()
            values = np.zeros(len(a), VALUE)
            for f in VALUE.names:
                values[f] = a[f]
            raw = values.tobytes()
            wb = rd.WriteBatch(raw_mode=True)
            for i, off in enumerate(a["queue_offset"].tolist()):
                wb.put(entry_key(t, qid, off), raw[i * 28:(i + 1) * 28])
            db.write(wb)
        wb = rd.WriteBatch(raw_mode=True)
        wb.set_default_column_family(db.get_column_family_handle(OFFSET_CF))
        for (topic, qid), (phy, cq) in table.max.items():
            wb.put(offset_key(topic.encode(), qid, "max"), struct.pack(">qq", phy, cq))
        if table.checkpoint is not None:
            wb.put(CHECKPOINT_KEY, struct.pack(">q", table.checkpoint))
        db.write(wb)
        db.flush(True)
        offsets.flush(True)
    finally:
        db.close()
    for extra in ("rocksdict-config.json", "LOG"):  # the binding's own settings, RocksDB's info log: not the data
        Path(path, extra).unlink(missing_ok=True)
    _fsync_tree(path)


def _fsync_tree(path: str) -> None:
    for name in os.listdir(path):
        p = os.path.join(path, name)
        if os.path.isfile(p):
            with open(p, "rb+") as f:
                os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
