"""``rocketidx verify``: an index checked in process or on Spark, and its report printed."""
from __future__ import annotations

import json
import os
import sys

from rocketidx.cli.common import add_broker_conf, add_broker_version, apply_broker_conf, spark_flag_misused, spark_settings
import rocketidx.storage as storage
from rocketidx.units import HASH_SLOTS_HELP, INDEX_NUM_HELP, count_arg, size_arg


def cmd_verify(a) -> int:
    broker = apply_broker_conf(a)
    if sum(bool(x) for x in (a.index, a.consumequeue, a.store)) != 1:
        print("rocketidx verify: give one of --index DIR, --consumequeue DIR, --store STORE", file=sys.stderr)
        return 2
    if a.store:
        return _verify_store(a, broker)
    if a.consumequeue:
        return _verify_queues(a, broker)
    from rocketidx.verify.core import BuildRead, open_for_verify, verify_index
    from rocketidx.verify.report import VerifyReport
    pre = VerifyReport()
    files, manifest = open_for_verify(a.index, a.hash_slots, a.index_num, pre)
    windows = manifest.window_ms if manifest else None
    window_ids = manifest.window_ids if manifest else None
    if pre.counts:  # files that could not be opened are left out of the rest
        window_ids = None
    if a.in_process and (a.spark or spark_flag_misused(a, "verify", "Spark (drop --in-process)",
                                                         ("master", "spark_conf", "split_bytes"))):
        if a.spark:
            print("rocketidx verify: --spark and --in-process exclude each other", file=sys.stderr)
        return 2
    rules = BuildRead.of(manifest)
    engine = _verify_engine(a, files, rules)
    if not a.json:
        print(f"engine: {engine.name} ({engine.reason})")
    if engine.spark:
        report = _verify_on_spark(a, files, windows, window_ids, rules)
    else:
        report = verify_index(files, a.commitlog, window_ms=windows, window_ids=window_ids, check_crc=not a.no_crc,
                              rules=rules)
    report.problems[:0] = pre.problems
    report.counts.update(pre.counts)
    if a.json:
        print(json.dumps(report.as_dict()))
    else:
        print_verify(report)
    return 0 if report.clean else 1


def _verify_engine(a, files, rules):
    from rocketidx.build.engine import choose_engine, data_bytes
    from rocketidx.commitlog.segments import list_segments
    work = sum(min(storage.footprint(f.path)) for f in files)
    if a.commitlog:
        work += data_bytes(list_segments(a.commitlog))
    out_of_place = ("the build saw PHYSICALOFFSET fields that are not their records' positions: judged in one "
                    "in-process pass") if rules.fields_out_of_place and a.commitlog and not a.spark else None
    return choose_engine(work, in_process=a.in_process, master=a.master, break_even=spark_settings(a).break_even,
                         spark_only="--spark" if a.spark else None, in_process_only=out_of_place)


def _verify_on_spark(a, files, windows, window_ids, rules):
    from rocketidx.config import project_conf
    from rocketidx.spark.session import load_spark_settings, spark_session
    from rocketidx.spark.verify import verify_index_spark
    settings = load_spark_settings(a.spark_conf or project_conf("spark.json"), split_bytes=a.split_bytes,
                                   master=a.master)
    from rocketidx.cli.progress import spark_progress
    with spark_session(settings) as spark, spark_progress(spark, "verify on Spark", enabled=not a.json):
        return verify_index_spark(files, a.commitlog, spark=spark, window_ms=windows, window_ids=window_ids,
                                  check_crc=not a.no_crc, split_bytes=settings.split_bytes, rules=rules)


def _verify_store(a, broker: dict) -> int:
    """``verify --store``: every area of a stopped broker's store against its CommitLog, on the engine the
    rule picks (the store's CommitLog size; ``--master``, ``--spark``, ``--in-process`` as for the index)."""
    from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS, delay_levels_ms
    import rocketidx.layout as L
    from rocketidx.verify.store import verify_store
    from rocketidx.build.engine import choose_engine, data_bytes
    from rocketidx.commitlog.segments import list_segments
    if a.commitlog:
        print("rocketidx verify: --store reads the store's own commitlog/; drop --commitlog", file=sys.stderr)
        return 2
    if a.in_process and (a.spark or spark_flag_misused(a, "verify", "Spark (drop --in-process)",
                                                         ("master", "spark_conf", "split_bytes"))):
        if a.spark:
            print("rocketidx verify: --spark and --in-process exclude each other", file=sys.stderr)
        return 2
    delays = delay_levels_ms(broker["messageDelayLevel"]) if "messageDelayLevel" in broker else DEFAULT_DELAYS_MS
    cq_size = broker.get("mappedFileSizeConsumeQueue")
    kw = dict(hash_slot_num=a.hash_slots, index_num=a.index_num, delays_ms=delays, check_crc=not a.no_crc,
              cq_file_size=L.cq_file_size(cq_size or L.DEFAULT_CQ_FILE_SIZE), broker=broker,
              broker_source=f"--broker-conf {a.broker_conf}" if a.broker_conf else None,
              broker_version=a.broker_version)
    log = os.path.join(a.store, "commitlog")
    engine = choose_engine(data_bytes(list_segments(log)) if os.path.isdir(log) else 0, in_process=a.in_process,
                           master=a.master, break_even=spark_settings(a).break_even,
                           spark_only="--spark" if a.spark else None)
    if not a.json:
        print(f"engine: {engine.name} ({engine.reason})")
    if engine.spark:
        from rocketidx.cli.progress import spark_progress
        from rocketidx.config import project_conf
        from rocketidx.spark.session import load_spark_settings, spark_session
        from rocketidx.spark.verify import verify_store_spark
        settings = load_spark_settings(a.spark_conf or project_conf("spark.json"), split_bytes=a.split_bytes,
                                       master=a.master)
        with spark_session(settings) as s, spark_progress(s, "verify on Spark", enabled=not a.json):
            report = verify_store_spark(a.store, spark=s, split_bytes=settings.split_bytes, **kw)
    else:
        report = verify_store(a.store, **kw)
    if a.json:
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
    for area in ("index", "consumequeue", "checkpoint"):
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


def _verify_queues(a, broker: dict) -> int:
    """``verify --consumequeue``: the files alone in this process; with ``--commitlog`` the log's queues are
    rebuilt on the engine the rule picks (Spark, or this process), the comparison is made here."""
    from rocketidx.build.engine import choose_engine, data_bytes
    from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS, delay_levels_ms
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.output.open import consumequeue_dir
    from rocketidx.verify.queues import verify_consumequeues
    if a.in_process and (a.spark or spark_flag_misused(a, "verify", "Spark (drop --in-process)",
                                                         ("master", "spark_conf", "split_bytes"))):
        if a.spark:
            print("rocketidx verify: --spark and --in-process exclude each other", file=sys.stderr)
        return 2
    if not a.commitlog and (a.spark or spark_flag_misused(a, "verify --consumequeue", "a check with --commitlog "
                                                          "(the files alone are checked in this process)",
                                                          ("master", "spark_conf", "split_bytes"))):
        if a.spark:
            print("rocketidx verify: --spark needs --commitlog with --consumequeue (the files alone are checked "
                  "in this process)", file=sys.stderr)
        return 2
    delays = delay_levels_ms(broker["messageDelayLevel"]) if "messageDelayLevel" in broker else DEFAULT_DELAYS_MS
    directory = consumequeue_dir(a.consumequeue)
    spark = False
    if a.commitlog:
        engine = choose_engine(data_bytes(list_segments(a.commitlog)), in_process=a.in_process, master=a.master,
                               break_even=spark_settings(a).break_even, spark_only="--spark" if a.spark else None)
        if not a.json:
            print(f"engine: {engine.name} ({engine.reason})")
        spark = engine.spark
    if spark:
        from rocketidx.cli.progress import spark_progress
        from rocketidx.config import project_conf
        from rocketidx.spark.session import load_spark_settings, spark_session
        from rocketidx.spark.verify import verify_consumequeues_spark
        settings = load_spark_settings(a.spark_conf or project_conf("spark.json"), split_bytes=a.split_bytes,
                                       master=a.master)
        with spark_session(settings) as s, spark_progress(s, "verify on Spark", enabled=not a.json):
            report = verify_consumequeues_spark(directory, a.commitlog, spark=s, split_bytes=settings.split_bytes,
                                                delays_ms=delays, check_crc=not a.no_crc)
    else:
        report = verify_consumequeues(directory, a.commitlog, check_crc=not a.no_crc, delays_ms=delays)
    if a.json:
        print(json.dumps(report.as_dict()))
    else:
        checked = f"{report.entries_checked:,} entries in the files"
        if report.expected_entries is not None:
            checked += f"; the CommitLog dispatches {report.expected_entries:,}"
        print(checked)
        if report.clean:
            print("clean: no problems found")
        else:
            print("problems: " + ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items())))
            for p in report.problems:
                print(f"  {p.file} @ byte {p.offset}: [{p.kind}] {p.detail}")
    return 0 if report.clean else 1
