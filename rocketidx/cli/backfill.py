"""``rocketidx backfill`` and ``jobs/backfill.py``: a stopped broker's index and ConsumeQueues repaired from its
CommitLog (by default both, from one read), on the engine the range's size picks."""
from __future__ import annotations

import argparse
import json

from rocketidx.cli.common import add_broker_conf, add_broker_version, add_engine_arguments, spark_flag_misused
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


def run_backfill_command(a: argparse.Namespace) -> int:
    """``rocketidx backfill``: the flags :func:`add_backfill_arguments` made -> a
    :class:`rocketidx.config.BackfillRequest` -> :func:`rocketidx.ops.backfill.backfill` -> the plan and result
    on stdout."""
    from rocketidx.config import backfill_request
    request = backfill_request(a.store, targets=a.targets, dry_run=a.dry_run, window_ms=a.window,
                               hash_slot_num=a.hash_slots, index_num=a.index_num, timezone=a.timezone,
                               check_crc=not a.no_crc, remove_unexplained=a.remove_unexplained,
                               cq_file_size=a.cq_file_size, broker_conf=a.broker_conf,
                               broker_version=a.broker_version, in_process=getattr(a, "in_process", False),
                               master=a.master, spark_conf=a.spark_conf, split_bytes=a.split_bytes,
                               partitions=a.partitions)
    if request.engine.in_process and spark_flag_misused(a, "backfill", "Spark (drop --in-process)",
                                                        ("master", "spark_conf", "split_bytes", "partitions")):
        return 2
    return report_backfill(request, as_json=a.json)


def report_backfill(request, *, as_json: bool) -> int:
    """Run the repair ``request`` asks for, its plans on stdout as they are made (not with ``as_json``), then the
    engine, or the whole plan and result as one JSON object."""
    from rocketidx.ops.backfill import backfill
    out = backfill(request, log=(lambda *_: None) if as_json else print)
    engine = out.engine.as_dict() if out.engine else None
    if as_json:
        r, q = out.index, out.queues
        index = {} if r is None else {
            "plan": r.plan.as_dict(), "installed": r.installed, "backup_dir": r.backup_dir,
            "checkpoint_index_msg_timestamp": r.checkpoint_index_ts, "wall_s": round(r.wall_s, 3)}
        queues = {"skipped": out.queues_skipped} if out.queues_skipped else None if q is None else {
            "plan": q.plan.as_dict(), "backup_dir": q.backup_dir, "rolled_back": q.rolled_back,
            "wall_s": round(out.queues_wall_s, 3)}
        print(json.dumps(index | {"engine": engine, "spark": out.spark} | ({"consumequeue": queues} if queues else {})))
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
