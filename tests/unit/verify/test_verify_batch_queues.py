"""verify --store checks a store's batch consume queues (issue 34): the topics its config/topics.json marks
queue.type=BatchCQ are rebuilt in process and compared file by file; a lost file and a changed unit are
named with the byte offset of the first unit that differs."""
from __future__ import annotations

import json
import shutil

from scenarios import Rec, lay_segment, props, write_segments

import rocketidx.layout as L
from rocketidx.build.in_process import build_index
from rocketidx.cli import main
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


def verify(store, capsys) -> dict:
    main(["verify", "--store", str(store), "--json", "--broker-version", "5.5.0"])
    return json.loads(capsys.readouterr().out)


def test_a_stores_batch_queues_are_checked_and_damage_named(tmp_path, capsys):
    store = store_with_batch_queues(tmp_path)
    area = verify(store, capsys)["areas"]["batchconsumequeue"]
    assert area["clean"] and area["entries_checked"] == 27  # 14 batches and 13 plain sends
    files = sorted((store / L.BATCH_CQ_DIR / "B" / "0").iterdir())
    assert len(files) == 3  # 10 units a file
    data = bytearray(files[1].read_bytes())
    data[46 * 4 + 28 + 7] ^= 1  # unit 4's base offset
    files[1].write_bytes(bytes(data))
    files[2].unlink()
    area = verify(store, capsys)["areas"]["batchconsumequeue"]
    assert area["counts"] == {"unit": 1, "missing-file": 1}
    assert {(p["file"].rsplit("/", 1)[1], p["offset"], p["kind"]) for p in area["problems"]} == {
        (files[1].name, 46 * 4, "unit"), (files[2].name, 0, "missing-file")}
    assert "consumequeue/B" not in json.dumps(verify(store, capsys)["state"]["skipped"])
