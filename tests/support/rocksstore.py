"""A stopped broker's store whose consume queue is a RocksDB database (storeType=defaultRocksDB): records of
two topics over three queues, a delayed message and a prepared transaction half (which makes no entry), and
the database a 5.x broker's dispatch leaves (rocketidx's, which the broker matrix holds equal to a 5.5.0
broker's own): for the verify and backfill tests of issue 34."""
from __future__ import annotations

import struct

from scenarios import T0, Rec, lay_segment, props, write_segments

import rocketidx.consumequeue.rocksdb as R


def store_with_rocksdb_queues(tmp_path, n: int = 60, lmq: str | None = None):
    """``lmq``: a light-queue rule (``rocksdb``: 5.5.0's, ``5.2``: 5.3.2 to 5.4's): every fifth record also
    names two light queues (``enableLmq``), as the broker's multi-dispatch writes them, and a %DLQ% record
    names one, which 5.5.0's rule leaves out and 5.3.3's keeps."""
    recs, next_offset, lmq_offset = [], {}, {}
    for i in range(n):
        topic, qid = (b"A", i % 2) if i % 3 else (b"B", 0)
        topic = b"%DLQ%g" if lmq and i == 25 else topic
        tx = 0x4 if i == 17 else 0  # a prepared half: no entry, and no queue offset taken
        q = next_offset.get((topic, qid), 0)
        pairs = [("TAGS", f"t{i % 4}")]
        if lmq and (i % 5 == 0 or i == 25):
            names = ["%LMQ%x", f"%LMQ%y{i % 2}"] if i != 25 else ["%LMQ%x"]
            offs = [lmq_offset.get(nm, 0) for nm in names]
            lmq_offset.update({nm: o + 1 for nm, o in zip(names, offs)})  # the put assigns them, whatever the rule
            pairs += [("INNER_MULTI_DISPATCH", ",".join(names)), ("INNER_MULTI_QUEUE_OFFSET", ",".join(map(str, offs)))]
        recs.append(Rec(topic=topic, properties=props(*pairs), queue_id=qid, queue_offset=q,
                        store_timestamp_ms=T0 + 1000 * i, tx=tx))
        if not tx:
            next_offset[(topic, qid)] = q + 1
    store = write_segments(tmp_path / "store", [lay_segment(recs[:n // 2], size=1 << 14, blank=True),
                                                lay_segment(recs[n // 2:], size=1 << 14, base_offset=1 << 14)])
    from rocketidx.config import LightQueues
    R.write_table(store / "consumequeue", R.dispatched_table(store / "commitlog",
                                                             light_queues=LightQueues(True, lmq) if lmq else None))
    (tmp_path / "broker.conf").write_text("storeType=defaultRocksDB\n" + ("enableLmq=true\n" if lmq else ""))
    return store


def change(db, family: str, key: bytes, value: bytes | None) -> None:
    """Put (or, with None, delete) one key of a stopped broker's database, as damage does."""
    import rocksdict as rd
    fams = rd.Rdict.list_cf(str(db))
    d = rd.Rdict(str(db), options=rd.Options(raw_mode=True),
                 column_families={f: rd.Options(raw_mode=True) for f in fams})
    try:
        cf = d if family == "default" else d.get_column_family(family)
        if value is None:
            del cf[key]
        else:
            cf[key] = value
        d.flush()
    finally:
        d.close()
    (db / "rocksdict-config.json").unlink(missing_ok=True)


def entry_value(phy: int, size: int, tags: int, store_ts: int) -> bytes:
    return struct.pack(">qiqq", phy, size, tags, store_ts)
