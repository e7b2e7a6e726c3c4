"""``rocketidx verify``: flags -> a :class:`rocketidx.config.VerifyRequest` -> :func:`rocketidx.ops.verify.verify`
(an index, ConsumeQueues or a stopped broker's store, in process or on Spark) -> its report printed."""
from __future__ import annotations

import json
import os
import sys

from rocketidx.cli.common import add_broker_conf, add_broker_version, spark_flag_misused
from rocketidx.units import HASH_SLOTS_HELP, INDEX_NUM_HELP, count_arg, size_arg


def cmd_verify(a) -> int:
    from rocketidx.config import verify_request
    request = verify_request(index=a.index, consumequeue=a.consumequeue, store=a.store, commitlog=a.commitlog,
                             broker_conf=a.broker_conf, broker_version=a.broker_version, hash_slot_num=a.hash_slots,
                             index_num=a.index_num, check_crc=not a.no_crc, in_process=a.in_process, spark=a.spark,
                             master=a.master, spark_conf=a.spark_conf, split_bytes=a.split_bytes)
    if sum(bool(x) for x in (a.index, a.consumequeue, a.store)) != 1:
        print("rocketidx verify: give one of --index DIR, --consumequeue DIR, --store STORE", file=sys.stderr)
        return 2
    if a.store and a.commitlog:
        print("rocketidx verify: --store reads the store's own commitlog/; drop --commitlog", file=sys.stderr)
        return 2
    if a.in_process and (a.spark or spark_flag_misused(a, "verify", "Spark (drop --in-process)",
                                                         ("master", "spark_conf", "split_bytes"))):
        if a.spark:
            print("rocketidx verify: --spark and --in-process exclude each other", file=sys.stderr)
        return 2
    if a.consumequeue and not a.commitlog and (a.spark or spark_flag_misused(
            a, "verify --consumequeue", "a check with --commitlog (the files alone are checked in this process)",
            ("master", "spark_conf", "split_bytes"))):
        if a.spark:
            print("rocketidx verify: --spark needs --commitlog with --consumequeue (the files alone are checked "
                  "in this process)", file=sys.stderr)
        return 2
    from rocketidx.cli.progress import CommandProgress
    from rocketidx.ops.verify import verify
    report = verify(request, CommandProgress("verify", enabled=not a.json, say_engine=not a.json)).report
    if a.store:
        return _print_store(report, a.json)
    if a.consumequeue:
        return _print_queues(report, a.json)
    if a.json:
        print(json.dumps(report.as_dict()))
    else:
        print_verify(report)
    return 0 if report.clean else 1


def _print_store(report, as_json: bool) -> int:
    """``verify --store``: the store's state, what a restart does, and each area's problems."""
    if as_json:
        print(json.dumps(report.as_dict()))
        return 0 if report.clean else 1
    st = report.state
    cp = st["checkpoint"]
    print(f"store {report.store}: {'crashed (abort present)' if st['abort'] else 'stopped cleanly (no abort)'}; "
          f"lock {st['lock']}")
    print("checkpoint: " + ("missing" if cp is None else ", ".join(f"{k} {v}" for k, v in cp.items())))
    model = st["restart_model"]
    print(f"a {model['kind']} restart ({model['version']} broker; settings: {model['switches']['source']}):")
    for line in model["statements"]:
        print(f"  {line['what']}  [{line['java']}]")
    idx = model.get("index")
    if idx and (idx["restored_entries"] or idx["lost_entries"]):
        print(f"  the index lacks {idx['restored_entries'] + idx['lost_entries']:,} entries: the restart restores "
              f"{idx['restored_entries']:,}, {idx['lost_entries']:,} stay lost")
    cq = model.get("consumequeue")
    if cq and (cq["restored_entries"] or cq["lost_entries"]):
        print(f"  the queues lack {cq['restored_entries'] + cq['lost_entries']:,} entries: the restart restores "
              f"{cq['restored_entries']:,}, {cq['lost_entries']:,} stay lost or wrong")
    for what, why in st.get("skipped", {}).items():
        print(f"{what}: skipped: {why}")
    for queue, why in st.get("unexplained_queues", {}).items():
        print(f"consumequeue/{queue}: not a problem, listed apart: {why}")
    for area in ("index", "consumequeue", "batchconsumequeue", "checkpoint"):
        r = report.areas.get(area)
        if r is None:
            print(f"{area}: not present")
            continue
        if area == "consumequeue" and "consumequeue" in st.get("skipped", {}):
            continue
        print(f"{area}: " + ("clean" if r.clean else ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items()))))
        for kind, what in sorted(report.restart.get(area, {}).items()):
            print(f"  {kind}: on restart, {what}")
        for p in r.problems:
            print(f"  {p.file} @ byte {p.offset}: [{p.kind}] {p.detail}")
        if r.log_mismatch:
            print(f"  {r.log_mismatch}")
    print("clean: no problems found" if report.clean else "problems found")
    return 0 if report.clean else 1


def print_verify(r) -> None:
    print(f"{'file':24} {'entries':>10} {'begin phy':>14} {'end phy':>14} {'slots used':>10} {'problems':>8}")
    for f in r.files:
        print(f"{f.name:24} {f.entries:>10,} {f.begin_phy_offset:>14} {f.end_phy_offset:>14} "
              f"{f.hash_slot_count:>10,} {f.problems:>8}")
    if r.expected_entries is not None:
        print(f"entries checked {r.entries_checked:,}; the CommitLog implies {r.expected_entries:,} over offsets "
              f"{r.covered_range[0]}..{r.covered_range[1]}")
    if r.expired_items:
        print(f"{r.expired_items:,} entries point below the CommitLog's first offset (retention removed their "
              f"messages): not judged")
    if r.clean:
        print("clean: no problems found")
        return
    print("problems: " + ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items())))
    for p in r.problems:
        print(f"  {p.file} @ byte {p.offset}: [{p.kind}] {p.detail}")
    if r.log_mismatch:  # last, where a terminal shows it, under the problems it explains
        print(r.log_mismatch)


def add_parser(sub) -> None:
    v = sub.add_parser("verify", help="check IndexFiles' structure and, with --commitlog, their content",
                       description="Check IndexFiles (a build output or a broker's store/index): headers, slots and "
                                   "chains; with --commitlog also that every entry points at a message carrying its "
                                   "key and that every key of the log is indexed. Exit 1 when problems are found.")
    v.add_argument("--index", help="build output, or a directory of IndexFiles (store/index); a path or a URI")
    add_broker_conf(v)
    v.add_argument("--consumequeue", help="check ConsumeQueue files instead: a build output, a broker store, or a "
                                          "consumequeue directory; the files alone, or with --commitlog every entry")
    v.add_argument("--store", help="a stopped broker's store: its index, every ConsumeQueue and its checkpoint "
                                   "against its commitlog/, with what a restart would do about each problem")
    add_broker_version(v)
    v.add_argument("--commitlog", help="CommitLog (or store) directory: also check content and coverage")
    v.add_argument("--hash-slots", type=count_arg("--hash-slots", 1), default=None, help=HASH_SLOTS_HELP)
    v.add_argument("--index-num", type=count_arg("--index-num", 1), default=None, help=INDEX_NUM_HELP)
    v.add_argument("--no-crc", action="store_true", help="skip the body CRC check while reading")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.add_argument("--in-process", action="store_true", help="check in this process, no Spark")
    v.add_argument("--spark", action="store_true", help="check on Spark (default master local[*])")
    v.add_argument("--master", default=None, help="check on Spark with this master")
    v.add_argument("--spark-conf", default=None, help="Spark settings and break-even (default conf/spark.json)")
    v.add_argument("--split-bytes", type=size_arg("--split-bytes"), default=None, help="on Spark: CommitLog bytes per task")


def _print_queues(report, as_json: bool) -> int:
    """``verify --consumequeue``: the entries checked and the problems."""
    if as_json:
        print(json.dumps(report.as_dict()))
    else:
        checked = f"{report.entries_checked:,} entries in the files"
        if report.expected_entries is not None:
            checked += f"; the CommitLog dispatches {report.expected_entries:,}"
        print(checked)
        if report.expired_items:
            print(f"{report.expired_items:,} units stand for messages below the CommitLog's first offset (retention "
                  f"removed them): not judged")
        if report.clean:
            print("clean: no problems found")
        else:
            print("problems: " + ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items())))
            for p in report.problems:
                print(f"  {p.file} @ byte {p.offset}: [{p.kind}] {p.detail}")
    return 0 if report.clean else 1
