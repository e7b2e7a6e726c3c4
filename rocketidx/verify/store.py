"""``verify --store``: a stopped broker's whole store against its CommitLog, with what a restart would do.

In: ``STORE`` as a broker leaves it: ``commitlog/``, ``index/``, ``consumequeue/``, ``checkpoint``, ``abort``,
``lock``. Out: a :class:`StoreReport`: the store's state (whether it crashed, who holds its lock, the
checkpoint, and the restart model of :mod:`rocketidx.verify.restart`: what a restart dispatches again), one
:class:`rocketidx.verify.report.VerifyReport` per area (``index``, ``consumequeue``, ``checkpoint``), and for
every kind of problem found what a restart of the broker does about it.

One read of the CommitLog: a rebuild of the queues and the index into scratch space, against which the queues
are compared; an index that is the rebuild's byte for byte needs only its structure checked, any other is
verified against the log as ``verify --index`` does (a second read).

Stays true: nothing in the store is written or created (the lock is probed, not taken); ``abort`` and a
lock are state, not problems, and so are entries a restart restores (the index's ``restored`` gaps); a
checkpoint field is a problem only where a restart would then delete or miss data; the areas are judged by the same code as ``verify --index`` and ``verify --consumequeue``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import rocketidx.layout as L
from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS
from rocketidx.commitlog.records import scan_records
from rocketidx.commitlog.segments import Segment, list_segments, open_segment
from rocketidx.broker.store import BrokerStore
from rocketidx.output.local import same_bytes
from rocketidx.verify.core import open_for_verify, verify_index
from rocketidx.verify.coverage import add_gap_problems, log_gaps
import rocketidx.verify.restart as restart
from rocketidx.verify.restart import BrokerSwitches
from rocketidx.commitlog.entries import tag_entries_on
from rocketidx.verify.queues import QueueRestart, list_queues, verify_consumequeues
from rocketidx.verify.report import VerifyReport
from rocketidx.consumequeue.batch import store_batch_file_size
from rocketidx.verify.rules import check_index_rules
from rocketidx.verify.rocksdb import ROCKSDB_RESTART

# What a restart does about each kind of problem (the broker's load, recover and re-dispatch).
CQ_RESTART = {
    "file-size": "the broker's load stops at a queue file of another length: it does not start",
    "name": "not a queue file by its name: the broker's load trips on it",
    "stray-file": "not a queue: the broker's load skips it (loadConsumeQueue opens only topic/<int>/ directories)",
    "missing-file": "{redispatch}",
    "missing-entry": "{redispatch}",
    "missing-queue": "{redispatch}",
    "dirty-tail": "truncateDirtyLogicFiles cuts entries at or past the CommitLog's end",
    "wrong-field": "kept: consumers are sent another message than the CommitLog puts there",
    "extra-entry": "kept: consumers are sent a message the CommitLog does not put there",
    "extra-file": "kept",
    "unexplained-queue": "kept: a queue the CommitLog does not explain",
    "order": "kept: consumers read these entries as they are",
    "blank": "kept",
    "zero": "kept",
}
REDISPATCH = ("a restart re-dispatches the records from offset {start} on ({how}), and a queue takes only those "
              "past its last entry: an entry missing before that stays missing and its message is never consumed")
INDEX_RESTART = "stays missing: {again}, so queryMsgByKey never finds these keys until the index is repaired"
CHECKPOINT_RESTART = {
    "index-deleted-on-restart": "the abnormal restart deletes these IndexFiles and re-indexes only from the "
                                "recovery start: keys of earlier messages are lost to queryMsgByKey",
}


@dataclass
class StoreReport:
    store: str
    state: dict
    areas: dict[str, VerifyReport] = field(default_factory=dict)
    restart: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return all(r.clean for r in self.areas.values())

    def as_dict(self) -> dict:
        return {"store": self.store, "clean": self.clean, "state": self.state,
                "areas": {k: v.as_dict() for k, v in self.areas.items()}, "restart": self.restart}


def _first_store_time(seg: Segment, check_crc: bool) -> int | None:
    buf = open_segment(seg)
    try:
        for recs in scan_records(buf, seg, 0, 1, check_crc=check_crc, batch_records=1):
            if len(recs):
                return int(recs[0, L.REC_STORE_TS])
        return None
    finally:
        if hasattr(buf, "close"):
            buf.close()


def queues_end(directory: str) -> int:
    """``ConsumeQueueStore.getMaxPhyOffsetInConsumeQueue``: the highest maxPhysicOffset (offset + size of the
    last valid entry, as ``ConsumeQueue.recover`` finds it) of any queue; -1 without one. A queue whose files
    the broker cannot load (a file of another size) is left out: the broker would not start."""
    from rocketidx.consumequeue.reader import Queue
    from rocketidx.errors import CorruptRecordError
    queues, file_size = list_queues(directory, VerifyReport())
    best = -1
    for (topic, qid), offsets in queues.items():
        if not offsets:
            continue
        q = Queue(topic, int(qid), os.path.join(directory, topic, qid), offsets, file_size)
        try:
            q.recover()
        except (CorruptRecordError, OSError):
            continue
        best = max(best, q.max_physic)
    return best


def batch_queues_end(directory: Path, topics) -> int:
    """The batch consume queues' part of D: each ``topics`` queue's ``getMaxPhysicOffset``, which for a batch
    consume queue is the physical offset of its last valid unit, where it starts, not where it ends
    (``BatchConsumeQueue.recover`` walks its last three files); -1 without a unit."""
    best = -1
    for topic in topics:
        for qdir in sorted((directory / topic).iterdir()) if (directory / topic).is_dir() else ():
            names = sorted(n for n in os.listdir(qdir) if n.isdigit()) if qdir.is_dir() else []
            for name in names[-3:]:
                units = np.fromfile(qdir / name, np.dtype([("phy", ">i8"), ("size", ">i4"), ("rest", "V34")]))
                valid = units[(units["phy"] >= 0) & (units["size"] > 0)]
                if len(valid):
                    best = max(best, int(valid["phy"].max()))
    return best


def queues_max_offset(directory: str) -> int | None:
    """The highest CommitLog offset any queue's newest file references: where the newest entry's message
    starts (a repair sets logicsMsgTimestamp from its store time). None without an entry."""
    queues, _ = list_queues(directory, VerifyReport())
    best = None
    for key, offsets in queues.items():
        if not offsets:
            continue
        units = np.fromfile(os.path.join(directory, *key, f"{max(offsets):020d}"), L.CQ_UNIT)
        used = units[(units["size"] != 0) & (units["size"] != L.CQ_BLANK[1])]
        if len(used):
            best = max(best or 0, int(used["phy_offset"].max()))
    return best


def verify_store(store: str | os.PathLike, *, hash_slot_num: int | None = None, index_num: int | None = None,
                 delays_ms: tuple[int, ...] = DEFAULT_DELAYS_MS, check_crc: bool = True,
                 cq_file_size: int = L.DEFAULT_CQ_FILE_SIZE, index_check=verify_index, builder=None,
                 broker: dict | None = None, broker_source: str | None = None,
                 broker_version: str | None = None) -> StoreReport:
    """Check every area of ``store`` against its CommitLog (see the module docstring). ``cq_file_size``: the
    queue file size where no queue file tells it; ``broker``: the broker's settings
    (:func:`rocketidx.config.broker_settings` of ``broker_source``), ``broker_version`` its release (5.x by
    default), for the restart model (:mod:`rocketidx.verify.restart`).

    One read: ``builder`` (the in-process build by default; :func:`rocketidx.spark.verify.verify_store_spark`
    gives Spark's) rebuilds the queues and the index, with the store's sizes and as the broker writes it (one
    sequence), into scratch space; the queues are compared with that rebuild. The index is judged as the
    restart leaves it: the files a crash restart deletes are left out, and of the entries the files lack, those
    the restart indexes again are state (``restored``), the others problems. Files that are the rebuild's
    byte for byte need only their structure checked; any other is checked by ``index_check`` against the log,
    which reads it again, as does the look at the log outside the files' offsets."""
    store = BrokerStore.open(store)
    commitlog = store.commitlog
    segments = store.segments()
    checkpoint = store.checkpoint()
    abort = store.crashed
    cq_dir = store.consumequeue
    switches = BrokerSwitches.of(broker, broker_source)
    from rocketidx.config import queue_store
    rocksdb = store.queue_store_kind() == "rocksdb" or queue_store(broker or {}) == "rocksdb"
    batch = sorted(store.batch_topics())
    version = restart.broker_version(broker_version)
    from rocketidx.config import broker_release, light_queues
    lmq = light_queues(broker or {}, broker_release(broker_version))  # enableMultiDispatch's light queues
    state = {"abort": abort, "lock": store.lock_state(), "checkpoint": checkpoint,
             "index": store.index.is_dir(), "consumequeue": cq_dir.is_dir(), "skipped": {}}
    if rocksdb:
        from rocketidx.consumequeue.rocksdb import QueueTable, is_rocksdb, read_table
        from rocketidx.errors import StoreLayoutError
        rocks_unreadable = None
        try:  # none at all is an empty database
            rocks = read_table(cq_dir) if is_rocksdb(cq_dir) else QueueTable()
        except StoreLayoutError as e:
            rocks, rocks_unreadable = None, e.reason
        state["consumequeue_store"] = "rocksdb"
        state["queues_end_from"] = ("the database's CHECKPOINT_TOPIC key (RocksDBConsumeQueueOffsetTable."
                                    "getMaxPhyOffset; 0 without one)")
        from rocketidx.config import rocksdb_light_queues
        lmq = rocksdb_light_queues(broker or {}, broker_release(broker_version))  # the database's own rule
    check_batch = bool(batch) and builder is None  # batch consume queues are rebuilt in process for now
    for topic in batch if not check_batch else ():
        state["skipped"][f"consumequeue/{topic}"] = ("a BatchCQ topic (config/topics.json): its queues live in "
                                                     "batchconsumequeue/, which rocketidx checks in process only")
    report = StoreReport(str(store), state)
    pre, files, sizes = VerifyReport(), [], None
    if store.index.is_dir() and any(store.index.iterdir()):
        files, _ = open_for_verify(store.index, hash_slot_num, index_num, pre)
        sizes = (files[0].hash_slot_num, files[0].index_num) if files else None
        check_index_rules(files, str(commitlog), tag_entries_on())
    files_cq = cq_dir.is_dir() and not rocksdb
    file_size = (list_queues(str(cq_dir), VerifyReport())[1] if files_cq else 0) or cq_file_size
    scratch = Path(tempfile.mkdtemp(prefix="rocketidx-store-verify-"))
    try:
        batch_size = store_batch_file_size(store.root / L.BATCH_CQ_DIR,
                                           (broker or {}).get("mapperFileSizeBatchConsumeQueue"))
        rebuilt = _rebuild(commitlog, scratch / "build", sizes, file_size, delays_ms, check_crc, builder, lmq,
                           batch=(tuple(batch), batch_size) if check_batch else None)
        model = restart.restart_model(
            abort=abort, version=version, switches=switches,
            queues_end=max(queues_end(str(cq_dir)) if files_cq else (_rocks_end(rocks) if rocksdb else -1),
                           batch_queues_end(store.root / L.BATCH_CQ_DIR, batch) if check_batch else -1),
            segments=segments, log_end=rebuilt.log_end, checkpoint=checkpoint, index_files=files,
            first_store_time=lambda seg: _first_store_time(seg, check_crc))
        state["restart_model"] = model.as_dict()
        state["recovery_start"] = {"offset": model.redispatch_from, "how": model.how}
        # With messageIndexEnable (the default) every key of the log belongs in the index: a store whose
        # index/ lost every file (or never had one) lacks them all, and the restart model says which come back.
        if switches.message_index_enable:
            report.areas["index"], at_end = _index_area(files, pre, rebuilt, model, commitlog, check_crc, index_check)
            state["restart_model"]["index"] = _index_state(report.areas["index"], model, at_end)
            again = (f"the restart indexes only the records it dispatches at or past offset {model.reindex_from}"
                     if model.reindex_from is not None else "the restart indexes no record again")
            report.restart["index"] = {k: INDEX_RESTART.format(again=again) for k in report.areas["index"].counts}
            report.areas["checkpoint"] = _checkpoint_problems(files, model)
        # A store without consumequeue/ lost every queue: each one the log dispatches is missing.
        # A missing queue entry the restart's re-dispatch puts back is state, like the index's (restored).
        queue_restart = QueueRestart(model.redispatch_from)
        if rocksdb and rocks is None:
            cq = VerifyReport()
            cq.add(str(cq_dir), 0, "unreadable", rocks_unreadable)
        elif rocksdb:
            cq, queue_restart = _rocks_area(cq_dir, rocks, commitlog, segments, model.redispatch_from, delays_ms,
                                            check_crc, lmq)
        cq = cq if rocksdb else verify_consumequeues(
            str(cq_dir), str(commitlog), delays_ms=delays_ms, check_crc=check_crc, file_size=cq_file_size,
            rebuild=rebuilt.queues, skip_topics=batch, unexplained=state.setdefault("unexplained_queues", {}),
            restart=queue_restart, light_queues=lmq)
        state["restart_model"]["consumequeue"] = {"restored_entries": queue_restart.restored,
                                                  "lost_entries": queue_restart.lost}
        if check_batch:
            report.areas["batchconsumequeue"] = compare_batch_files(store.root / L.BATCH_CQ_DIR,
                                                                    scratch / "build" / L.BATCH_CQ_DIR)
            report.restart["batchconsumequeue"] = {
                k: BATCH_RESTART[k].format(how=model.how, again="dispatches no record again: the file stays missing"
                                           if model.redispatch_from is None else
                                           f"re-dispatches the records from offset {model.redispatch_from} on: "
                                           "the file's units of records before that stay missing")
                for k in report.areas["batchconsumequeue"].counts}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report.areas["consumequeue"] = cq
    redispatch = REDISPATCH.format(start=model.redispatch_from, how=model.how)
    report.restart["consumequeue"] = {k: CQ_RESTART.get(k, "kept").format(redispatch=redispatch) for k in cq.counts} \
        if not rocksdb else {k: ROCKSDB_RESTART[k].format(again="the restart dispatches no record again"
                                                          if model.redispatch_from is None else
                                                          f"the restart dispatches again only the records from "
                                                          f"offset {model.redispatch_from} on")
                             for k in cq.counts}
    cp = report.areas.get("checkpoint")
    if cp is not None:
        report.restart["checkpoint"] = {k: CHECKPOINT_RESTART[k] for k in cp.counts}
    return report


def _rocks_end(rocks) -> int:
    """The queues' highest end D of a RocksDB consume queue: its checkpoint key, 0 without one
    (``RocksDBConsumeQueueOffsetTable.getMaxPhyOffset``): a restart then dispatches the records past offset 0,
    strictly, and the log's first record, at 0, never (a 5.5.0 broker whose database was deleted did so)."""
    if rocks is None:  # a database RocksDB cannot open: the broker's load fails, nothing is dispatched
        return -1
    return rocks.checkpoint if rocks.checkpoint is not None else 0


def _rocks_area(db: Path, rocks, commitlog: Path, segments, redispatch_from, delays_ms, check_crc: bool, lmq):
    """The store's RocksDB consume queue against the one a dispatch of the whole log makes
    (:mod:`rocketidx.verify.rocksdb`)."""
    from rocketidx.consumequeue.rocksdb import dispatched_table
    from rocketidx.verify.rocksdb import compare_tables
    want = dispatched_table(commitlog, delays_ms=delays_ms, check_crc=check_crc, light_queues=lmq)
    return compare_tables(str(db), rocks, want, log_start=segments[0].base_offset if segments else 0,
                          redispatch_from=redispatch_from)


def _index_area(files, pre: VerifyReport, rebuilt, model, commitlog: Path, check_crc: bool, index_check
                ) -> tuple[VerifyReport, int]:
    """The index as the restart leaves it (see :func:`verify_store`): problems are the entries it will lack.
    Also returns the entries of the record at the last file's end that the restart indexes again."""
    kept = [f for f in files if f.name not in model.index_deleted]
    same = bool(files) and not model.index_deleted and not pre.problems and len(files) == len(rebuilt.index) \
        and all(same_bytes(f.path, b) for f, b in zip(files, rebuilt.index))
    # The record at the last file's end is taken again when the re-dispatch reaches it: its entries that the
    # files lack are restored, not lost (open_end).
    again = bool(kept) and model.reindex_from is not None and model.reindex_from <= model.index_end_phy_offset
    if same:
        idx = verify_index(kept)
        idx.expected_entries, idx.covered_range = rebuilt.entries, rebuilt.covered
    elif kept:
        idx = index_check(kept, str(commitlog), check_crc=check_crc, open_start=True, open_end=again, gaps=False)
    else:
        idx = VerifyReport()
    at_end = _missing_at(kept, model.index_end_phy_offset, commitlog, check_crc) if again and not same else 0
    covered = idx.covered_range
    if covered is None and kept:
        covered = _items_span(kept)
    add_gap_problems(idx, log_gaps(str(commitlog), covered, check_crc=check_crc, restored_from=model.reindex_from))
    idx.problems[:0] = pre.problems
    idx.counts.update(pre.counts)
    return idx, at_end


def _items_span(files) -> tuple[int, int] | None:
    spans = [(f.header.begin_phy_offset, f.header.end_phy_offset) for f in files if f.header.index_count > 1]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None


def _missing_at(files, offset: int, commitlog: Path, check_crc: bool) -> int:
    """Entries of the message at ``offset`` that ``files`` lack (those a restart that reaches it restores)."""
    from rocketidx.commitlog.readers import CommitLogReader
    segs = list_segments(str(commitlog), from_offset=offset, to_offset=offset + 1)
    want = 0
    for _, _, _, e in CommitLogReader(segs, check_crc=check_crc, start_offset=offset, end_offset=offset + 1).entry_chunks():
        want += int(np.count_nonzero(e.column("phy_offset").to_numpy() == offset))
    have = 0
    for f in files:
        if f.header.begin_phy_offset <= offset <= f.header.end_phy_offset and f.header.index_count > 1:
            phy = f.read_item_fields(1, f.header.index_count, ("phy_offset",))["phy_offset"]
            have += int(np.count_nonzero(phy == offset))
    return max(0, want - have)


def _index_state(idx: VerifyReport, model, at_end: int) -> dict:
    """What the restart does to the index, for ``--json``: the files it deletes, where it takes records again,
    and how many entries the files lack that it restores and that it does not."""
    restored = sum(g["entries"] for g in idx.gaps if g["restored"]) + at_end
    return {"deleted_files": model.index_deleted, "end_phy_offset": model.index_end_phy_offset,
            "reindex_from": model.reindex_from, "restored_entries": restored,
            "lost_entries": idx.counts.get("missing", 0) + idx.counts.get("uncovered", 0)}


@dataclass
class _Rebuilt:
    index: list[Path]  # the rebuilt IndexFiles, oldest first
    entries: int
    covered: tuple[int, int] | None
    queues: Callable  # a ``rebuild`` for verify_consumequeues: the queues already built
    log_end: int = 0  # where reading the log stopped: the end of its valid records


def _rebuild(commitlog: Path, out: Path, sizes: tuple[int, int] | None, file_size: int, delays_ms, check_crc: bool,
             builder, light_queues=None, batch: tuple[tuple[str, ...], int] | None = None) -> _Rebuilt:
    """The one read: the queues (and, with ``sizes``, the index) rebuilt from the whole log into ``out``."""
    from rocketidx.config import BuildConfig
    from rocketidx.consumequeue.writer import QueueInfo
    from rocketidx.output.manifest import CONSUMEQUEUE_DIR, INDEX_DIR, Manifest
    if builder is None:
        from rocketidx.build.in_process import build_index as builder
    config = BuildConfig(hash_slot_num=sizes[0] if sizes else L.DEFAULT_HASH_SLOT_NUM,
                         index_num=sizes[1] if sizes else L.DEFAULT_INDEX_NUM, window_ms=0, timezone="UTC",
                         check_crc=check_crc, targets=("index", "consumequeue") if sizes else ("consumequeue",),
                         cq_file_size=file_size, delay_levels=" ".join(f"{d // 1000}s" for d in delays_ms),
                         light_queues=light_queues, **({"batch_topics": batch[0], "batch_file_size": batch[1]}
                                                       if batch else {}))
    manifest, summary = builder(commitlog, out, config, time_index=None)
    rows = list(Manifest.from_dict(manifest, str(out)).files) if sizes else []
    infos = [QueueInfo(**q) for q in manifest["consumequeues"]["queues"]]
    segments = list_segments(str(commitlog))
    log_end = summary.stop["phy_offset"] if summary.stop else (segments[-1].end_offset if segments else 0)
    return _Rebuilt([out / INDEX_DIR / f.name for f in rows], summary.entries,
                    (min(f.begin_phy_offset for f in rows), max(f.end_phy_offset for f in rows)) if rows else None,
                    lambda *_: (str(out / CONSUMEQUEUE_DIR), infos, log_end), log_end)


BATCH_RESTART = {
    "missing-file": "a restart {again} ({how}; the batch consume queues' ends take part in where it starts)",
    "extra-file": "kept",
    "unit": "kept: consumers are sent what these units say (BatchConsumeQueue.getBatchMessage)",
    "file-size": "the broker's load stops at a batch consume queue file of another length: it does not start",
}


def compare_batch_files(store_dir: Path, rebuilt_dir: Path) -> VerifyReport:
    """The store's batch consume queue files against the rebuild's, file by file: a file the rebuild makes
    and the store lacks, one the store holds and the rebuild does not, one of another length, and the first
    46-byte unit that differs in each file."""
    report = VerifyReport()
    theirs = {str(p.relative_to(store_dir)): p for p in store_dir.glob("*/*/*") if p.is_file()} \
        if store_dir.is_dir() else {}
    ours = {str(p.relative_to(rebuilt_dir)): p for p in rebuilt_dir.glob("*/*/*") if p.is_file()} \
        if rebuilt_dir.is_dir() else {}
    for name in sorted(set(theirs) | set(ours)):
        if name not in theirs:
            report.add(str(store_dir / name), 0, "missing-file", "the rebuild's batch consume queue file is missing")
            continue
        if name not in ours:
            report.add(str(theirs[name]), 0, "extra-file", "a batch consume queue file no rebuild makes")
            continue
        a, b = theirs[name].read_bytes(), ours[name].read_bytes()
        sizes = np.frombuffer(b, np.dtype([("head", "V8"), ("size", ">i4"), ("rest", "V34")]),
                              len(b) // L.BATCH_CQ_UNIT_SIZE)["size"]
        report.entries_checked += int(np.count_nonzero(sizes > 0))
        if len(a) != len(b):
            report.add(str(theirs[name]), min(len(a), len(b)), "file-size", f"{len(a)} bytes, the rebuild's {len(b)}")
        elif a != b:
            at = next(i for i in range(0, len(a), L.BATCH_CQ_UNIT_SIZE)
                      if a[i:i + L.BATCH_CQ_UNIT_SIZE] != b[i:i + L.BATCH_CQ_UNIT_SIZE])
            report.add(str(theirs[name]), at, "unit", "the first unit that is not the rebuild's")
    return report


def _checkpoint_problems(files, model) -> VerifyReport:
    """After a crash the broker deletes IndexFiles whose endTimestamp passes indexMsgTimestamp (docs/formats.md):
    each such file that holds entries below where the restart indexes again is a problem (their keys are lost;
    the ``uncovered`` and ``missing`` counts of the index say how many)."""
    out = VerifyReport()
    for f in files:
        if f.name not in model.index_deleted or f.header.index_count <= 1:
            continue
        if model.reindex_from is None or f.header.begin_phy_offset < model.reindex_from:
            out.add(f.path, 0, "index-deleted-on-restart",
                    f"endTimestamp {f.header.end_timestamp} > the checkpoint's indexMsgTimestamp; entries from offset "
                    f"{f.header.begin_phy_offset} are not indexed again")
    return out
