"""``rocketidx gen`` (a sample store from a seed) and ``rocketidx demo`` (what ``make run`` runs)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from rocketidx.cli.build import print_summary
from rocketidx.sample import DEMO_MESSAGES
from rocketidx.units import count_arg, duration_arg, size_arg


def cmd_gen(a) -> int:
    from rocketidx.sample.generate import GenConfig, generate_store
    cfg = GenConfig(messages=a.messages, segment_bytes=a.segment_bytes, body_bytes=a.body_bytes, topics=a.topics,
                    queues=a.queues,
                    keys_per_message=a.keys_per_message, span_ms=a.span, start_ms=a.start_ms, seed=a.seed,
                    clock_steps=a.clock_steps, clock_back_ms=a.clock_back, share_lmq=a.share_lmq,
                    lmq_queues=a.lmq_queues, share_batch=a.share_batch)
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

    from rocketidx.sample import demo
    from rocketidx.units import human_bytes
    root = Path(a.dir)
    store = demo.sample_store(root, a.messages, say=lambda s: print(s, flush=True),
                              warn=lambda s: print(f"rocketidx demo: {s}", file=sys.stderr))
    out = root / "out"
    print(f"building the index of {store}/commitlog into {out} in this process ...", flush=True)
    core = demo.build_in_process(store, out)
    print_summary(core.summary, unread_bytes=core.unread_bytes)
    if not a.in_process:
        print(f"the same build on Spark ({a.master}) into {root / 'out-spark'} ...", flush=True)
        spark = demo.compare_on_spark(store, root / "out-spark", out, a.master)
        mb = core.summary.bytes_read / 1e6
        print(f"  in process:  {core.summary.wall_s:.2f}s ({mb / core.summary.wall_s:.0f} MB/s)")
        print(f"  on Spark:    session start {spark.session_s:.1f}s, first build {spark.first_s:.2f}s "
              f"({mb / spark.first_s:.0f} MB/s), a second build in the same session {spark.again_s:.2f}s "
              f"({mb / spark.again_s:.0f} MB/s); {spark.tasks} tasks, no shuffle; "
              f"files {'identical' if spark.identical else 'DIFFER'}")
        print(f"  Spark's fixed cost (a JVM, Python workers) pays off against one in-process worker from about "
              f"{human_bytes(spark.break_even)} of CommitLog on this kind of machine (engine_break_even in "
              "conf/spark.json, which backfill, verify and stats go by); `rocketidx build` runs in process on a "
              "worker per core, which a local Spark session does not beat at any size, and a cluster (spark-submit) "
              "always runs on Spark.")
    print(f"files: {', '.join(f['name'] for f in core.manifest['files'])}")
    print("example queries (queryMsgByKey semantics, newest first):")
    for topic, key, offsets in demo.example_lookups(store, out):
        print(f"  {topic}#{key}: {offsets}")
    return 0


def _share(text: str) -> float:
    """A share from 0 to 1 (``--share-lmq``)."""
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: a share from 0 to 1, e.g. 0.1")
    return v


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
    g.add_argument("--share-lmq", type=_share, default=0.0,
                   help="share of the messages (0 to 1) that name light queues in INNER_MULTI_DISPATCH, with the "
                        "offsets a broker with enableLmq assigns (default 0)")
    g.add_argument("--lmq-queues", type=count_arg("--lmq-queues"), default=10,
                   help="light queues those messages spread over: %%LMQ%%L0, %%LMQ%%L1, ... (default 10)")
    g.add_argument("--share-batch", type=_share, default=0.0,
                   help="share of the messages (0 to 1) that are inner batches of 2 to 16 messages on the BatchCQ "
                        "topic BatchTopic, which STORE/config/topics.json marks queue.type=BatchCQ (default 0)")
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
