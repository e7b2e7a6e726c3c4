"""``backfill --store --targets ...consumequeue``: a stopped broker's ConsumeQueues, and its index, repaired
from one read of its CommitLog.

In: ``STORE`` (``commitlog/``, ``consumequeue/``, ``index/``, ``checkpoint``, ``abort``, ``lock``), the targets,
the sizes (the store's own, else the broker's settings) and a builder (the in-process build or Spark's, as
the index backfill takes). Out: a :class:`StoreRepair`: the queues' plan and what was swapped, the index
backfill's result.

The steps, all under the broker's lock (both kinds):

1. an interrupted repair of either kind is rolled back (its journal);
2. one build of the targets from the whole CommitLog, with the store's sizes, into
   ``STORE/consumequeue.rocketidx-staging/<stamp>/`` (synced when it commits; a dry run builds in a temporary
   directory instead);
3. the queues: each file against its rebuild (:func:`rocketidx.backfill.queues.compare_queues`), then the swap
   (:mod:`rocketidx.backfill.swap`: backup, journal, one rename at a time), then the checkpoint's
   logicsMsgTimestamp;
4. the index: left as it is when its files are the rebuild's, byte for byte (a file equal to what RocketMQ
   writes from this log needs no verification: :func:`rocketidx.backfill.index.plan_from_rebuild`); otherwise
   the index backfill's own plan runs (each file verified, the lost range rebuilt: more reads of the log),
   taking the rebuild of step 2 where it keeps no file, and installing through the same swap (one stamp
   names both backups).

Stays true: nothing is written outside ``consumequeue/``, ``index/`` and ``checkpoint`` but rocketidx's staging
and backup directories beside them; healthy files keep their inode; run on its own result, nothing changes.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketidx.backfill.queues import (QueueRepair, batch_queue_plan, compare_queues, install_batch_queues,
                                       install_queues, queue_files, store_queue_file_size)
from rocketidx.backfill.index import BackfillResult, backfill_locked, index_dir, plan_from_rebuild
import rocketidx.backfill.swap as swap
from rocketidx.consumequeue.batch import store_batch_file_size
from rocketidx.config import BuildConfig, LightQueues
import rocketidx.layout as L
from rocketidx.broker.store import BrokerStore
from rocketidx.output.manifest import CONSUMEQUEUE_DIR, INDEX_DIR, Manifest


@dataclass
class StoreRepair:
    queues: QueueRepair | None = None
    batch: QueueRepair | None = None  # batchconsumequeue/, with BatchCQ topics rebuilt in process
    index: BackfillResult | None = None
    wall_s: float = 0.0
    rolled_back: list[str] = field(default_factory=list)


def repair_store(store: str | os.PathLike, *, targets: tuple[str, ...] = ("index", "consumequeue"),
                 hash_slot_num: int | None = None, index_num: int | None = None, window_ms: int = 0,
                 timezone_name: str = "local", cq_file_size: int | None = None,
                 delay_levels: str = L.DEFAULT_DELAY_LEVELS, check_crc: bool = True, dry_run: bool = False,
                 builder=None, log=print, remove_unexplained: bool = False, light_queues=None,
                 batch_file_size: int | None = None, queue_store: str = "files",
                 rocksdb_compression: tuple[str, str] = ("lz4", "zstd"),
                 rocksdb_light_queues: LightQueues | None = None) -> StoreRepair:
    """Repair ``targets`` of the stopped broker's ``store`` (see the module docstring); ``dry_run``: the plans
    only. ``cq_file_size``: the queue file size where no queue file of the store tells it; ``light_queues``:
    the broker's light-queue rules (its enableMultiDispatch), whose queues are rebuilt like any other.

    ``queue_store``: ``rocksdb`` when the broker keeps its queues in a RocksDB database (its
    ``storeType=defaultRocksDB``; a ``consumequeue/`` holding one says so too): the database is rebuilt
    (:mod:`rocketidx.backfill.rocksdb`), compressed as ``rocksdb_compression`` (the broker's
    ``rocksdbCompressionType`` and ``bottomMostCompressionTypeForConsumeQueueStore``) says, with the light
    queues ``rocksdb_light_queues`` names (its ``enableLmq``; :func:`rocketidx.config.rocksdb_light_queues`).

    Guards, each said in one line: a BatchCQ topic of ``config/topics.json`` is skipped; a queue no rebuild makes is left alone (listed in the
    plan) unless ``remove_unexplained``. The index repair goes ahead either way."""
    t0 = time.monotonic()
    store = BrokerStore.open(store)
    rocksdb = "consumequeue" in targets and (queue_store == "rocksdb" or store.queue_store_kind() == "rocksdb")
    if rocksdb:  # the RocksDB store dispatches light queues by its own rule (dispatchLMQ), enableLmq alone
        light_queues = rocksdb_light_queues
    else:
        queue_files(store.consumequeue)  # refuse a stray before the lock file is made
    batch = tuple(sorted(store.batch_topics()))
    skip = {t: "a BatchCQ topic (config/topics.json): its queues live in batchconsumequeue/" for t in batch}
    if builder is None:
        from rocketidx.build.in_process import build_index as builder
    if dry_run:
        log("dry run: nothing in the store changes; its lock is taken shared, so read access is enough")
    with store.lock(create=not dry_run):
        result = StoreRepair(rolled_back=_roll_back(store, targets, dry_run, log))
        if not dry_run:
            swap.clear_staging(store, "consumequeue", log)
        files = {} if rocksdb else queue_files(store.consumequeue)  # as the roll-backs left it
        size, size_from = store_queue_file_size(files, cq_file_size or L.DEFAULT_CQ_FILE_SIZE)
        index = index_dir(store, hash_slot_num, index_num) if "index" in targets else None
        if index is not None and index.paths:  # the store's own files say which release's rules they follow
            from rocketidx.commitlog.entries import tag_entries_on
            from rocketidx.verify.rules import check_index_rules
            check_index_rules(index.open(), str(store.commitlog), tag_entries_on())
        # A RocksDB consume queue is made from its own dispatch of the log (backfill/rocksdb.py), not from files.
        build_targets = tuple(t for t in targets if not (rocksdb and t == "consumequeue"))
        config = BuildConfig(hash_slot_num=index.hash_slot_num if index else L.DEFAULT_HASH_SLOT_NUM,
                             index_num=index.index_num if index else L.DEFAULT_INDEX_NUM, window_ms=window_ms,
                             timezone=timezone_name, check_crc=check_crc, targets=build_targets or targets,
                             cq_file_size=size, delay_levels=delay_levels, light_queues=light_queues,
                             batch_topics=batch if "consumequeue" in build_targets else (),
                             batch_file_size=store_batch_file_size(store.root / L.BATCH_CQ_DIR, batch_file_size))
        stamp = swap.new_stamp()
        out = Path(tempfile.mkdtemp(prefix="rocketidx-repair-")) / "build" if dry_run \
            else swap.staging_dir(store, "consumequeue", stamp)
        try:
            if build_targets:
                built, summary = builder(store.commitlog, out, config, time_index=None)
                log(f"read the CommitLog once: {summary.messages:,} messages -> "
                    + ("the index" if build_targets == ("index",) else
                       "the queues and the index" if "index" in targets else "the queues"))
            plan = None
            if rocksdb:
                out.mkdir(parents=True, exist_ok=True)
                result.queues = _repair_rocksdb(store, out, config, dry_run, stamp, log, rocksdb_compression)
            elif "consumequeue" in targets:  # an index-only repair never plans (nor removes) queues
                plan = compare_queues(store, files, size, size_from, out / CONSUMEQUEUE_DIR, skip_topics=skip,
                                      remove_unexplained=remove_unexplained)
                result.queues = QueueRepair(plan, rolled_back=result.rolled_back)
                for line in plan.lines():
                    log(line)
                if not dry_run and plan.changes:
                    # A store without a checkpoint gets none: the broker starts one at zero, the same as before.
                    logics = newest_entry_time(store, out) if (store / "checkpoint").exists() else None
                    backup = install_queues(store, out / CONSUMEQUEUE_DIR, plan, logics, stamp)
                    result.queues.backup_dir = str(backup)
                    log(f"consumequeue: replaced {len(plan.actions['replace'])}, wrote {len(plan.actions['write'])}, "
                        f"removed {len(plan.actions['remove'])} file(s); what was replaced or removed is in {backup}")
                if batch and (out / L.BATCH_CQ_DIR).is_dir():
                    result.batch = _repair_batch(store, out / L.BATCH_CQ_DIR, config, batch, dry_run, stamp, log)
                elif batch:
                    log(f"{L.BATCH_CQ_DIR}: skipped: the batch consume queues are rebuilt in process only for now")
            if index is not None:
                rebuilt = [out / INDEX_DIR / f.name for f in Manifest.from_dict(built, str(out)).files]
                same = plan_from_rebuild(store, rebuilt, hash_slot_num=hash_slot_num, index_num=index_num,
                                         window_ms=window_ms)
                if same is None:
                    log("index: not the rebuild's files byte for byte: the index backfill verifies each file")
                result.index = backfill_locked(
                    store, hash_slot_num=hash_slot_num, index_num=index_num, window_ms=window_ms,
                    timezone_name=timezone_name, dry_run=dry_run, check_crc=check_crc, log=log, t0=t0, plan=same,
                    builder=_Reuse(builder, out, built, summary, config), stamp=stamp)
        finally:
            shutil.rmtree(out.parent if dry_run else out, ignore_errors=True)
            swap.drop_empty_staging(store, "consumequeue")
    result.wall_s = time.monotonic() - t0
    return result


def _repair_rocksdb(store: BrokerStore, out: Path, config: BuildConfig, dry_run: bool, stamp: str, log,
                    compression) -> QueueRepair:
    from rocketidx.backfill.rocksdb import install_rocksdb, plan_rocksdb
    segments = store.segments()
    plan, table = plan_rocksdb(store, config, segments[0].base_offset if segments else 0)
    for line in plan.lines():
        log(line)
    repair = QueueRepair(plan)
    if not dry_run and plan.changes:
        logics = table.newest_store_time() if (store / "checkpoint").exists() else None
        backup = install_rocksdb(store, table, out / "rocksdb", plan, stamp, logics, *compression)
        repair.backup_dir = str(backup)
        log(f"consumequeue: a new RocksDB database of {table.entry_count:,} entries installed; "
            + (f"the one it replaced is in {backup}" if plan.actions["replace"] else
               f"the store had none (journal in {backup})"))
    return repair


def repair_queues(store: str | os.PathLike, *, cq_file_size: int | None = None,
                  delay_levels: str = L.DEFAULT_DELAY_LEVELS, check_crc: bool = True, dry_run: bool = False,
                  builder=None, log=print) -> QueueRepair:
    """``backfill --targets consumequeue``: :func:`repair_store` of the queues alone; the queues' part of its
    result."""
    return repair_store(store, targets=("consumequeue",), cq_file_size=cq_file_size, delay_levels=delay_levels,
                        check_crc=check_crc, dry_run=dry_run, builder=builder, log=log).queues


def _roll_back(store: BrokerStore, targets, dry_run: bool, log) -> list[str]:
    """Every interrupted repair of the targets, undone (a dry run says it would): the backups. The queues' are
    undone whatever the targets: a half-swapped consumequeue/ is never left for the broker."""
    undone = swap.roll_back_interrupted(store, "index", dry_run, log, "backfill") if "index" in targets else []
    undone += swap.roll_back_interrupted(store, L.BATCH_CQ_DIR, dry_run, log, "batch consume queue repair")
    return undone + swap.roll_back_interrupted(store, "consumequeue", dry_run, log, "ConsumeQueue repair")


def _repair_batch(store: BrokerStore, rebuilt: Path, config: BuildConfig, topics, dry_run: bool, stamp: str,
                  log) -> QueueRepair:
    plan = batch_queue_plan(store, rebuilt, config.batch_file_size, "the store's files, else the broker conf's "
                            "mapperFileSizeBatchConsumeQueue, else 13,800,000", topics)
    for line in plan.lines():
        log(line)
    repair = QueueRepair(plan)
    if not dry_run and plan.changes:
        backup = install_batch_queues(store.root, rebuilt, plan, stamp)
        repair.backup_dir = str(backup)
        log(f"{L.BATCH_CQ_DIR}: replaced {len(plan.actions['replace'])}, wrote {len(plan.actions['write'])}, removed "
            f"{len(plan.actions['remove'])} file(s); what was replaced or removed is in {backup}")
    return repair


def newest_entry_time(store: BrokerStore, out: Path) -> int | None:
    """The logicsMsgTimestamp a broker that dispatched the whole log would have: the store time of the newest
    queue entry's message (it sets the field at every entry it writes). None without an entry."""
    from rocketidx.query.lookup import read_messages_at
    from rocketidx.verify.store import queues_max_offset
    top = queues_max_offset(str(out / CONSUMEQUEUE_DIR)) if (out / CONSUMEQUEUE_DIR).is_dir() else None
    if top is None:
        return None
    table, found = read_messages_at(str(store.commitlog), [top])
    return int(table.column("store_timestamp_ms")[0].as_py()) if found[0] else None


class _Reuse:
    """The index backfill's builder: the build of step 2 when the backfill's range is the whole log with
    nothing kept (a lost or wholly damaged index), else the caller's builder for the range."""

    def __init__(self, builder, out: Path, built: dict, summary, config: BuildConfig):
        self.builder, self.out, self.built, self.summary, self.config = builder, out, built, summary, config

    def __call__(self, commitlog, out, config, *, start_offset=None, skip_entries=0, name_after=None):
        from rocketidx.commitlog.segments import list_segments
        segments = list_segments(commitlog)
        whole = start_offset in (None, segments[0].base_offset if segments else 0)
        if whole and not skip_entries and name_after is None and self.out.is_dir() and \
                (config.hash_slot_num, config.index_num, config.window_ms, config.timezone) == \
                (self.config.hash_slot_num, self.config.index_num, self.config.window_ms, self.config.timezone):
            os.rename(self.out, out)  # the backfill installs from its own staging: hand it this build's
            return self.built, self.summary
        return self.builder(commitlog, out, config, start_offset=start_offset, skip_entries=skip_entries,
                            name_after=name_after)
