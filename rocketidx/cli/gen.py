"""``rocketidx gen`` (a sample store from a seed) and ``rocketidx demo`` (what ``make run`` runs)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from rocketidx.cli.build import print_summary
from rocketidx.cli.common import spark_settings
from rocketidx.units import count_arg, duration_arg, size_arg


DEMO_MESSAGES = 300_000  # the sample store `make run` generates


def cmd_gen(a) -> int:
    from rocketidx.sample.generate import GenConfig, generate_store
    cfg = GenConfig(messages=a.messages, segment_bytes=a.segment_bytes, body_bytes=a.body_bytes, topics=a.topics,
                    queues=a.queues,
                    keys_per_message=a.keys_per_message, span_ms=a.span, start_ms=a.start_ms, seed=a.seed,
                    clock_steps=a.clock_steps, clock_back_ms=a.clock_back)
    t0 = time.monotonic()
    info = generate_store(a.out, cfg, replace=a.replace)
    info["wall_s"] = round(time.monotonic() - t0, 2)
    if a.json:
        print(json.dumps(info))
    else:
        from rocketidx.units import human_bytes
        print(f"wrote {info['messages']:,} messages in {info['segments']} segment(s) of "
              f"{human_bytes(info['segment_bytes'])} to {os.path.join(info['store'], 'commitlog')} "
              f"(CommitLog end offset {info['end_offset']:,}, seed {a.seed}) in {info['wall_s']:.2f}s")
    return 0


def cmd_demo(a) -> int:
    from pathlib import Path

    from rocketidx.build.in_process import build_index
    from rocketidx.build.summary import unread
    from rocketidx.config import BuildConfig
    from rocketidx.sample.generate import GenConfig, generate_store
    from rocketidx.commitlog.readers import read_segment
    from rocketidx.query.lookup import open_index, query_offsets
    from rocketidx.commitlog.segments import list_segments
    root = Path(a.dir)
    store = root / "store"
    messages = DEMO_MESSAGES if a.messages is None else a.messages
    if not (store / "generator.json").exists():
        print(f"generating a sample store of {messages:,} messages in {store} ...", flush=True)
        generate_store(store, GenConfig(messages=messages, segment_bytes=64 * 1024**2, span_ms=6 * 3_600_000))
    elif a.messages is not None:
        _demo_keeps_store(store, a.messages)
    out = root / "out"
    config = BuildConfig(timezone="UTC")
    print(f"building the index of {store}/commitlog into {out} in this process ...", flush=True)
    manifest, summary = build_index(store, out, config)
    print_summary(summary, unread_bytes=unread(list_segments(store), summary.stop)[0])
    if not a.in_process:
        _demo_on_spark(a, store, root / "out-spark", config, summary)
    print(f"files: {', '.join(f['name'] for f in manifest['files'])}")
    first, _ = read_segment(list_segments(store)[0], end=4096)
    files = open_index(out)
    print("example queries (queryMsgByKey semantics, newest first):")
    for row in first.slice(0, 3).to_pylist():
        for key in [row["uniq_key"]] + (row["keys"] or "").split(" ")[:1]:
            if key:
                offsets = query_offsets(files, row["topic"], key)
                print(f"  {row['topic']}#{key}: {offsets}")
    return 0


def _demo_keeps_store(store, asked: int) -> None:
    """``demo --messages N`` where a sample store exists already: it is kept (a demo never deletes data);
    say so unless it holds N messages."""
    try:
        held = json.loads((store / "generator.json").read_text()).get("messages")
    except (OSError, ValueError, AttributeError):
        held = None
    if held != asked:
        holds = f"holds {held:,} messages" if isinstance(held, int) else "holds a sample store"
        print(f"rocketidx demo: --messages {asked:,} ignored: {store} already {holds} and is kept; "
              f"delete {store} to generate {asked:,}", file=sys.stderr)


def _demo_on_spark(a, store, out, config, core) -> None:
    """The same build on Spark, with what Spark costs (session start, a first job) and what it buys (the
    read and write spread over the cores), so the demo shows where each engine belongs."""
    import filecmp

    from rocketidx.units import human_bytes
    from rocketidx.spark.build import build_index_spark
    from rocketidx.spark.session import spark_session
    settings = spark_settings(argparse.Namespace(spark_conf=None, master=a.master))
    print(f"the same build on Spark ({a.master}) into {out} ...", flush=True)
    t0 = time.monotonic()
    stats: dict = {}
    with spark_session(settings, sources=False) as spark:
        session_s = time.monotonic() - t0
        t1 = time.monotonic()
        _, summary = build_index_spark(store, out, config, spark=spark, stats=stats)
        first = time.monotonic() - t1
        t2 = time.monotonic()
        build_index_spark(store, out, config, spark=spark)
        again = time.monotonic() - t2
    same = all(filecmp.cmp(os.path.join(out, "index", n), os.path.join(store.parent, "out", "index", n), shallow=False)
               for n in os.listdir(os.path.join(out, "index")))
    mb = core.bytes_read / 1e6
    print(f"  in process:  {core.wall_s:.2f}s ({mb / core.wall_s:.0f} MB/s)")
    print(f"  on Spark:    session start {session_s:.1f}s, first build {first:.2f}s ({mb / first:.0f} MB/s), "
          f"a second build in the same session {again:.2f}s ({mb / again:.0f} MB/s); "
          f"{stats.get('partitions')} tasks, no shuffle; files {'identical' if same else 'DIFFER'}")
    print(f"  Spark's fixed cost (a JVM, Python workers) pays off from about {human_bytes(settings.break_even)} of "
          "CommitLog on this kind of machine (engine_break_even in conf/spark.json); below that `rocketidx build` "
          "picks the in-process engine by itself, and a cluster (spark-submit) always runs on Spark.")


def add_gen_parser(sub) -> None:
    g = sub.add_parser("gen", help="write a sample broker store (CommitLog segments) from a seed",
                       description="Write a valid broker store (STORE/commitlog/ segments of one size, a blank "
                                   "record where a message does not fit, a zero tail after the last one), the same "
                                   "bytes for the same seed and settings. Prints a summary; --json for one JSON line.")
    g.add_argument("--out", required=True, help="store directory to create (commitlog/ goes inside)")
    g.add_argument("--messages", type=count_arg("--messages"), required=True, help="how many messages to write")
    g.add_argument("--segment-bytes", type=size_arg("--segment-bytes"), default=64 * 1024**2, help="segment size (default 64m)")
    g.add_argument("--body-bytes", type=count_arg("--body-bytes"), default=300, help="mean body size (default 300)")
    g.add_argument("--topics", type=count_arg("--topics"), default=4,
                   help="how many topics the messages spread over (Topic0, Topic1, ...; default 4)")
    g.add_argument("--queues", type=count_arg("--queues"), default=8,
                   help="queues per topic (QUEUEID 0 to N-1), each with its own queue offsets (default 8)")
    g.add_argument("--keys-per-message", type=count_arg("--keys-per-message"), default=2, help="most KEYS per message (default 2)")
    g.add_argument("--span", type=duration_arg("--span"), default=24 * 3_600_000, help="time span (default 24h)")
    g.add_argument("--start-ms", type=count_arg("--start-ms"), default=1_700_000_000_000,
                   help="store time of the first message, epoch ms (default 1700000000000: 2023-11-14T22:13:20Z)")
    g.add_argument("--seed", type=int, default=1,
                   help="random seed: the same seed and settings give the same bytes (default 1)")
    g.add_argument("--clock-steps", type=count_arg("--clock-steps"), default=0,
                   help="places where the broker's clock steps back (default 0: store times only rise)")
    g.add_argument("--clock-back", type=duration_arg("--clock-back"), default=0,
                   help="how far the clock steps back at each place (e.g. 90m)")
    g.add_argument("--replace", action="store_true",
                   help="overwrite the CommitLog of a directory gen did not write (default: refuse)")
    g.add_argument("--json", action="store_true", help="print the summary as one JSON line")


def add_demo_parser(sub) -> None:
    d = sub.add_parser("demo", help="generate a sample store (once), build its index, show example queries",
                       description="What `make run` runs: generate a sample store in DIR/store unless one is there, "
                                   "build its index in process and on local Spark (the same bytes, with what each "
                                   "engine costs), and look a few of its keys up.")
    d.add_argument("--dir", default="sample", help="where the sample store and output go (default sample/)")
    d.add_argument("--messages", type=count_arg("--messages"), default=None,
                   help=f"messages in the sample store when it is generated (default {DEMO_MESSAGES}); a store "
                        "already in DIR is kept as it is (delete DIR/store to generate another)")
    d.add_argument("--master", default="local[*]", help="Spark master for the comparison run (default local[*])")
    d.add_argument("--in-process", action="store_true", help="build in process only, skip the Spark comparison")
