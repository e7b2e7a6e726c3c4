"""A stopped broker's store with batch consume queues (a queue.type=BatchCQ topic B of inner batches and plain
sends, a SimpleCQ topic S), its config/topics.json and its queues as the broker writes them (the broker matrix
holds rocketidx's equal to a 5.5.0 broker's): for the verify and backfill tests of issue 34."""
from __future__ import annotations

import json
import shutil

from scenarios import Rec, lay_segment, props, write_segments

import rocketidx.layout as L
from rocketidx.build.in_process import build_index
from rocketidx.config import BuildConfig


def store_with_batch_queues(tmp_path):
    recs, q = [], 0
    for i in range(40):
        if i % 3 == 0:
            recs.append(Rec(topic=b"B", properties=props(("INNER_NUM", "5"), ("INNER_BASE", str(q))), queue_id=0,
                            queue_offset=q, extra_sys_flag=0xC0))
            q += 5
        else:
            recs.append(Rec(topic=b"B" if i % 2 else b"S", properties=props(("TAGS", f"t{i % 3}")), queue_id=0,
                            queue_offset=q if i % 2 else i))
            q += i % 2
    store = write_segments(tmp_path / "store", [lay_segment(recs, size=1 << 16)])
    (store / "config").mkdir()
    (store / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {
        "B": {"topicName": "B", "attributes": {"queue.type": "BatchCQ"}}, "S": {"topicName": "S"}}}))
    config = BuildConfig(window_ms=0, timezone="UTC", targets=("consumequeue",), batch_topics=("B",),
                         batch_file_size=46 * 10)
    build_index(store, tmp_path / "built", config, time_index=None)
    for area in ("consumequeue", L.BATCH_CQ_DIR):
        shutil.copytree(tmp_path / "built" / area, store / area)
    (tmp_path / "broker.conf").write_text("mapperFileSizeBatchConsumeQueue=460\n")
    return store
