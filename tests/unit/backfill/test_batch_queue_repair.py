"""backfill --store repairs a store's batch consume queues (issue 34): a lost file is written and a damaged
one replaced from the in-process rebuild, under the same lock, backup and journaled swap as the ConsumeQueues;
a dry run changes nothing; a directory of a topic the topic table does not mark BatchCQ is left."""
from __future__ import annotations

import json

from batchstore import store_with_batch_queues
from brokerstore import snapshot

import rocketidx.layout as L
from rocketidx.cli import main


def test_a_lost_and_a_damaged_batch_queue_file_are_repaired_with_a_backup(tmp_path, capsys):
    store = store_with_batch_queues(tmp_path)
    qdir = store / L.BATCH_CQ_DIR / "B" / "0"
    files = sorted(qdir.iterdir())
    want = {f.name: f.read_bytes() for f in files}
    damaged = bytearray(want[files[1].name])
    damaged[46 * 3] ^= 0xFF
    files[1].write_bytes(bytes(damaged))
    files[2].unlink()
    (store / L.BATCH_CQ_DIR / "Stray" / "0").mkdir(parents=True)  # a topic the table does not mark BatchCQ
    before = snapshot(store)
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert snapshot(store) == before
    assert f"  replace  {L.BATCH_CQ_DIR}/B/0/{files[1].name}" in dry and f"  write    {L.BATCH_CQ_DIR}/B/0/{files[2].name}" in dry
    assert f"  left     {L.BATCH_CQ_DIR}/Stray" in dry

    assert main(["backfill", "--store", str(store), "--targets", "consumequeue"]) == 0
    out = capsys.readouterr().out
    assert {f.name: f.read_bytes() for f in sorted(qdir.iterdir())} == want
    backups = list((store / f"{L.BATCH_CQ_DIR}.backup").glob(f"*/{L.BATCH_CQ_DIR}/B/0/{files[1].name}"))
    assert len(backups) == 1 and backups[0].read_bytes() == bytes(damaged)
    assert f"{L.BATCH_CQ_DIR}: replaced 1, wrote 1, removed 0 file(s)" in out
    assert (store / L.BATCH_CQ_DIR / "Stray" / "0").is_dir()
    main(["verify", "--store", str(store), "--json", "--broker-version", "5.5.0"])
    assert json.loads(capsys.readouterr().out)["areas"]["batchconsumequeue"]["clean"]
