"""rocketidx.backfill.swap, the one journaled swap both repairs install through: one layout and one sync order
for the index and the queues, a roll-back of a swap cut at any rename, and the journals an earlier version
wrote (the index's flat backups) still rolled back."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import rocketidx.backfill.swap as swap
import rocketidx.layout as L


def _store(tmp_path: Path, area: str) -> tuple[Path, list[str], Path]:
    """A store whose ``area`` holds three files, a checkpoint, and a staging with two files: one replacing
    ``old[0]``, one new."""
    store = tmp_path / "store"
    rels = ["00000000000000000001", "00000000000000000002", "00000000000000000003"]
    if area == "consumequeue":
        rels = [f"T/0/{r}" for r in rels]
    for r in rels:
        (store / area / r).parent.mkdir(parents=True, exist_ok=True)
        (store / area / r).write_bytes(b"old " + r.encode())
    (store / "checkpoint").write_bytes(b"\x01" * L.CHECKPOINT_FILE_SIZE)
    staged = tmp_path / "staged"
    new = [rels[0], rels[0][:-1] + "9"]
    for r in new:
        (staged / r).parent.mkdir(parents=True, exist_ok=True)
        (staged / r).write_bytes(b"new " + r.encode())
    return store, rels, staged


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("area", swap.AREAS)
def test_every_area_swaps_with_one_layout_and_the_saved_checkpoint_synced_before_the_journal(tmp_path, area,
                                                                                            monkeypatch):
    store, rels, staged = _store(tmp_path, area)
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    before = _tree(store / area)
    field = "index_msg_timestamp_ms" if area == "index" else "logics_msg_timestamp_ms"
    s = swap.Swap(store, area, staged, (rels[0], rels[1]), (rels[0], rels[0][:-1] + "9"), checkpoint={field: 7})
    backup = swap.install(s, "20260101T000000.000000000Z-1")
    assert backup == store / f"{area}.backup" / "20260101T000000.000000000Z-1"
    assert sorted(p.name for p in backup.iterdir()) == sorted(["checkpoint", area, "journal.json"])
    assert _tree(backup / area) == {r: before[r] for r in (rels[0], rels[1])}
    assert (store / area / rels[0]).read_bytes() == b"new " + rels[0].encode()
    assert not (store / area / rels[1]).exists() and (store / area / rels[2]).read_bytes() == before[rels[2]]
    at = L.CHECKPOINT.fields[field][1]
    assert int.from_bytes((store / "checkpoint").read_bytes()[at:at + 8], "big") == 7
    journal = json.loads((backup / "journal.json").read_text())
    assert journal["format"] == 2 and journal["area"] == area and "finished" in journal
    assert journal["moved_to_backup"] == [rels[0], rels[1]] and journal["installed"] == list(s.move_in)
    # The saved checkpoint reaches the disk before the journal that names it, for both areas alike.
    saved = synced.index(str(backup / "checkpoint"))
    assert saved < synced.index(str(backup / "journal.json.tmp"))


@pytest.mark.parametrize("area", swap.AREAS)
def test_a_swap_cut_at_any_rename_rolls_back_to_the_bytes_before(tmp_path, area, monkeypatch):
    real = os.rename
    store0, rels, staged0 = _store(tmp_path / "probe", area)
    n = {"renames": 0}

    def counting(a, b):
        n["renames"] += 1
        return real(a, b)
    monkeypatch.setattr(os, "rename", counting)
    swap.install(swap.Swap(store0, area, staged0, (rels[0], rels[1]), (rels[0], rels[0][:-1] + "9")), "s")
    monkeypatch.setattr(os, "rename", real)
    assert n["renames"] == 4  # two files out, two in
    for cut in range(n["renames"]):
        store, _, staged = _store(tmp_path / f"cut{cut}", area)
        before, checkpoint = _tree(store / area), (store / "checkpoint").read_bytes()
        done = {"n": 0}

        def dying(a, b):
            if done["n"] == cut:
                raise KeyboardInterrupt("killed")
            done["n"] += 1
            return real(a, b)
        monkeypatch.setattr(os, "rename", dying)
        with pytest.raises(KeyboardInterrupt):
            swap.install(swap.Swap(store, area, staged, (rels[0], rels[1]), (rels[0], rels[0][:-1] + "9"),
                                   checkpoint={"index_msg_timestamp_ms": 9}), "s")
        monkeypatch.setattr(os, "rename", real)
        [(backup, journal)] = swap.interrupted(store, area)
        swap.roll_back(store, area, backup, journal)
        assert _tree(store / area) == before, cut
        assert (store / "checkpoint").read_bytes() == checkpoint
        assert not swap.interrupted(store, area)


def test_an_index_backfill_journal_of_format_1_is_still_rolled_back(tmp_path):
    """Before the one swap, the index's backups were flat (``index.backup/<stamp>/<name>``) and their journals
    said ``replace`` and ``install``; a store an older rocketidx was killed in is rolled back all the same."""
    store, rels, _ = _store(tmp_path, "index")
    before, checkpoint = _tree(store / "index"), (store / "checkpoint").read_bytes()
    backup = store / "index.backup" / "20250101T000000000000Z"
    backup.mkdir(parents=True)
    (backup / "checkpoint").write_bytes(checkpoint)
    os.rename(store / "index" / rels[1], backup / rels[1])
    (store / "index" / "00000000000000000009").write_bytes(b"half installed")
    (store / "checkpoint").write_bytes(b"\x02" * L.CHECKPOINT_FILE_SIZE)
    (backup / "journal.json").write_text(json.dumps({
        "store": str(store), "started": 1.0, "replace": [rels[1]], "install": ["00000000000000000009"],
        "checkpoint_existed": True, "moved_to_backup": [rels[1]], "installed": [], "checkpoint_before": None}))
    [(found, journal)] = swap.interrupted(store, "index")
    swap.roll_back(store, "index", found, journal)
    assert _tree(store / "index") == before
    assert (store / "checkpoint").read_bytes() == checkpoint
    assert "rolled_back" in json.loads((backup / "journal.json").read_text())


def test_a_stale_staging_is_removed_in_one_line_and_an_empty_one_goes_quietly(tmp_path):
    store = tmp_path / "store"
    left = swap.staging_dir(store, "index", "s") / "index"
    left.mkdir(parents=True)
    (left / "00000000000000000001").write_bytes(b"x")
    said: list[str] = []
    swap.clear_staging(store, "index", said.append)
    assert said == [f"removed an interrupted repair's staging ({store / 'index.rocketidx-staging'})"]
    assert not (store / "index.rocketidx-staging").exists()
    swap.staging_dir(store, "consumequeue", "s").parent.mkdir(parents=True)
    swap.drop_empty_staging(store, "consumequeue")
    assert not (store / "consumequeue.rocketidx-staging").exists()


def test_a_journal_that_is_not_json_is_refused_naming_it(tmp_path):
    from rocketidx.errors import StoreLayoutError
    store, _, _ = _store(tmp_path, "consumequeue")
    bad = store / "consumequeue.backup" / "s" / "journal.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x00garbage{")
    with pytest.raises(StoreLayoutError, match=f"{bad}.*not a repair journal"):
        swap.interrupted(store, "consumequeue")
