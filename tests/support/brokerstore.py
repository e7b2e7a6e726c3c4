"""A broker store for backfill tests: generated CommitLog, an index laid out as a broker writes it (one
sequence of files), a checkpoint and a lock; a simulated crash; and the check that a backfilled index
answers every key like a full rebuild."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from rocketidx.broker.store import write_checkpoint_index_ts
from rocketidx.build.in_process import build_index
from rocketidx.commitlog.entries import extract_entry_keys
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BuildConfig
from rocketidx.query.lookup import open_index, query_offsets

SLOTS, ITEMS = 1009, 3000


def snapshot(store: Path) -> dict[str, str]:
    """Every file under the store with a hash of its bytes."""
    out = {}
    for p in sorted(store.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(store))] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def broker_store(tmp_path: Path, messages: int = 20000) -> tuple[Path, list[dict]]:
    """A generated store whose index/ a broker wrote (one sequence of files, as from an empty store)."""
    store = tmp_path / "store"
    generate_store(store, GenConfig(messages=messages, segment_bytes=2 << 20, span_ms=3_600_000, seed=5))
    manifest, _ = build_index(store, tmp_path / "full", BuildConfig(hash_slot_num=SLOTS, index_num=ITEMS, window_ms=0,
                                                                   timezone="UTC"))
    (store / "index").mkdir()
    for f in manifest["files"]:
        shutil.copy(tmp_path / "full" / "index" / f["name"], store / "index" / f["name"])
    (store / "checkpoint").write_bytes(bytes(range(32)) + bytes(4096 - 32))
    (store / "lock").touch()  # every broker store has one
    return store, manifest["files"]


def crash(store: Path, files: list[dict], keep: int, deleted: int) -> None:
    """The broker crashed after file ``keep - 1`` filled up; it had already deleted ``deleted`` newest files."""
    write_checkpoint_index_ts(store, files[keep - 1]["end_timestamp"])
    (store / "abort").touch()
    for f in files[len(files) - deleted:]:
        (store / "index" / f["name"]).unlink()


def all_entry_keys(store: Path, from_offset: int = 0) -> list[tuple[str, str]]:
    keys = set()
    for batch in CommitLogReader(list_segments(store)):
        rows, _, ks = extract_entry_keys(batch)
        phy = batch.column("phy_offset").to_numpy()[rows]
        for p, k in zip(phy.tolist(), ks.to_pylist()):
            if p >= from_offset:
                topic, _, key = k.partition("#")
                keys.add((topic, key))
    return sorted(keys)


def assert_answers_like_full_rebuild(store: Path, full: Path, from_offset: int) -> int:
    a = open_index(store / "index", SLOTS, ITEMS)
    b = open_index(full)
    keys = all_entry_keys(store, from_offset)
    for topic, key in keys:
        assert query_offsets(a, topic, key) == query_offsets(b, topic, key), (topic, key)
    return len(keys)
