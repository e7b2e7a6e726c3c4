"""``rocketidx backfill`` and ``jobs/backfill.py``: a stopped broker's index and ConsumeQueues repaired from its
CommitLog (by default both, from one read), on the engine the range's size picks."""
from __future__ import annotations

import argparse
import json

from rocketidx.cli.common import (add_broker_conf, add_broker_version, add_engine_arguments, apply_broker_conf,
                                  spark_flag_misused, spark_settings)
from rocketidx.errors import ConfigError, StoreLayoutError
import rocketidx.storage as storage
from rocketidx.units import count_arg, duration_arg, size_arg


def add_backfill_arguments(bf: argparse.ArgumentParser, *, spark_conf: str | None = None,
                           engine_flag: bool = True) -> None:
    """The backfill's flags, for ``rocketidx backfill`` and ``jobs/backfill.py`` alike."""
    bf.add_argument("--store", required=True, help="the broker's store directory (commitlog/, index/, checkpoint)")
    bf.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    bf.add_argument("--window", type=duration_arg("--window"), default=0,
                    help="window length of the new files, as build's --window (a bare number is "
                         "milliseconds; default 0: one sequence, as the broker writes)")
    bf.add_argument("--hash-slots", type=count_arg("--hash-slots", 1), default=None,
                    help="default: read off the existing files, else the broker's 5000000")
    bf.add_argument("--index-num", type=count_arg("--index-num", 1), default=None,
                    help="default: read off the existing files, else the broker's 20000000")
    bf.add_argument("--timezone", default="local", help="zone of new file names (default: this host's)")
    bf.add_argument("--no-crc", action="store_true", help="skip the body CRC check while reading the CommitLog")
    bf.add_argument("--targets", default="index,consumequeue",
                    help="what to repair: index,consumequeue (default: both from one read of the CommitLog), index, "
                         "or consumequeue. Skipped with one line: BatchCQ topics of config/topics.json, and the "
                         "queues when consumequeue/ is a RocksDB database")
    bf.add_argument("--remove-unexplained", action="store_true",
                    help="also move to the backup the queues no rebuild makes (light %%LMQ%% queues, topics the log "
                         "no longer holds); by default they are left as they are and listed")
    bf.add_argument("--cq-file-size", type=size_arg("--cq-file-size"), default=None,
                    help="queue file size where the store's own files do not tell it (default: the size most of "
                         "them share, else the broker's 6000000)")
    bf.add_argument("--json", action="store_true", help="print the plan and result as JSON")
    add_broker_conf(bf)
    add_broker_version(bf)
    add_engine_arguments(bf, "rebuild", spark_conf, engine_flag)


class _EngineBuilder:
    """The backfill's builder: when the range to rebuild is known, :func:`rocketidx.build.engine.choose_engine`
    picks the in-process build or the Spark one (a session is started only then)."""

    def __init__(self, a, settings):
        self.a, self.settings = a, settings
        self.engine = None
        self.spark = None

    def __call__(self, commitlog, out, config, *, start_offset=None, skip_entries=0, name_after=None,
                 time_index="auto"):
        from rocketidx.build.local import build_index
        from rocketidx.build.engine import choose_engine, data_bytes
        from rocketidx.commitlog.segments import list_segments
        segments = list_segments(commitlog, from_offset=start_offset)
        self.engine = choose_engine(data_bytes(segments, start_offset), in_process=getattr(self.a, "in_process", False),
                                    master=self.a.master, break_even=self.settings.break_even)
        if not self.engine.spark:
            return build_index(commitlog, out, config, segments=segments, start_offset=start_offset,
                               skip_entries=skip_entries, name_after=name_after, time_index=time_index)
        from rocketidx.spark.backfill import SparkBuilder
        self.spark = SparkBuilder(self.settings)
        return self.spark(commitlog, out, config, start_offset=start_offset, skip_entries=skip_entries,
                          name_after=name_after, time_index=time_index)

    def close(self) -> None:
        if self.spark is not None:
            self.spark.close()


def run_backfill_command(a: argparse.Namespace) -> int:
    """``rocketidx backfill`` and ``jobs/backfill.py``: the flags :func:`add_backfill_arguments` made -> the
    backfill (the rebuild on the engine :func:`rocketidx.build.engine.choose_engine` picks for its range) -> the
    plan and result on stdout."""
    from rocketidx.backfill.store import run_backfill
    if storage.is_remote(a.store):
        raise StoreLayoutError(storage.redact(a.store), "backfill writes into a stopped broker's local store (its "
                                                        "lock, a backup and an atomic swap need a local disk); "
                                                        "give the store's path on the broker's machine")
    broker = apply_broker_conf(a)
    targets = {t.strip() for t in str(a.targets).split(",") if t.strip()}
    if not targets or targets - {"index", "consumequeue"}:
        raise ConfigError("--targets", a.targets, "index, consumequeue, or index,consumequeue")
    in_process = getattr(a, "in_process", False)
    if in_process and spark_flag_misused(a, "backfill", "Spark (drop --in-process)",
                                          ("master", "spark_conf", "split_bytes", "partitions")):
        return 2
    log = (lambda *_: None) if a.json else print
    args = dict(hash_slot_num=a.hash_slots, index_num=a.index_num, window_ms=a.window, timezone_name=a.timezone,
                dry_run=a.dry_run, check_crc=not a.no_crc, log=log)
    builder = _EngineBuilder(a, spark_settings(a))
    queues = None
    try:
        if "consumequeue" in targets:
            from rocketidx.backfill.repair import repair_store
            import rocketidx.layout as L
            size = a.cq_file_size or broker.get("mappedFileSizeConsumeQueue")
            rs = repair_store(a.store, targets=tuple(t for t in ("index", "consumequeue") if t in targets),
                              cq_file_size=size and L.cq_file_size(size),
                              delay_levels=broker.get("messageDelayLevel", L.DEFAULT_DELAY_LEVELS), builder=builder,
                              remove_unexplained=a.remove_unexplained, **args)
            q = rs.queues
            queues = {"skipped": "consumequeue/ is a RocksDB database"} if q is None else {
                "plan": q.plan.as_dict(), "backup_dir": q.backup_dir, "rolled_back": q.rolled_back,
                "wall_s": round(rs.wall_s, 3)}
            r = rs.index
        else:
            r = run_backfill(a.store, builder=builder, **args)
    finally:
        builder.close()
    engine = builder.engine.as_dict() if builder.engine else None
    spark = (builder.spark.stats if builder.spark else None) or None
    if a.json:
        index = {} if r is None else {
            "plan": r.plan.as_dict(), "installed": r.installed, "backup_dir": r.backup_dir,
            "checkpoint_index_msg_timestamp": r.checkpoint_index_ts, "wall_s": round(r.wall_s, 3)}
        print(json.dumps(index | {"engine": engine, "spark": spark} | ({"consumequeue": queues} if queues else {})))
    elif engine:
        print(f"engine: {engine['name']} ({engine['reason']})")
    return 0


def add_parser(sub) -> None:
    add_backfill_arguments(sub.add_parser(
        "backfill", help="repair a stopped broker's index and ConsumeQueues from its CommitLog",
        description="Repair a stopped broker's store from its CommitLog: the IndexFiles it lost or holds damaged "
                    "(the range after its last good file, up to the CommitLog's end) and its ConsumeQueues (each "
                    "file against a rebuild), from one read of the log; under the broker's lock, with a backup of "
                    "what it replaces and an atomic swap. --targets limits it to one; --dry-run prints the plan "
                    "and changes nothing (it needs only read access)."))
