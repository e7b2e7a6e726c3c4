"""verify --store checks a store's batch consume queues (issue 34): the topics its config/topics.json marks
queue.type=BatchCQ are rebuilt in process and compared file by file; a lost file and a changed unit are
named with the byte offset of the first unit that differs."""
from __future__ import annotations

import json

from batchstore import store_with_batch_queues

import rocketidx.layout as L
from rocketidx.cli import main


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


def test_the_restart_starts_past_the_batch_queues_last_unit(tmp_path, capsys):
    """D takes in the batch consume queues too (ConsumeQueueStore.getMaxPhyOffsetInConsumeQueue), and a batch
    queue's part is its last unit's offset, where that record starts: with consumequeue/ gone, D is there."""
    import shutil

    import numpy as np
    store = store_with_batch_queues(tmp_path)
    last = sorted((store / L.BATCH_CQ_DIR / "B" / "0").iterdir())[-1]
    units = np.frombuffer(last.read_bytes(), np.dtype([("phy", ">i8"), ("size", ">i4"), ("rest", "V34")]))
    top = int(units["phy"][units["size"] > 0].max())
    assert verify(store, capsys)["state"]["restart_model"]["dispatch_from_phy_offset"] >= top
    shutil.rmtree(store / "consumequeue")
    assert verify(store, capsys)["state"]["restart_model"]["dispatch_from_phy_offset"] == top
