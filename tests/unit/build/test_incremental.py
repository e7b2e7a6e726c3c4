"""Issue 35, Must show 2: incremental builds equal their reference over a log that grows in place and by
segments, is cut and rewritten by crash restarts (its tail given other store times, across windows), and loses
its oldest segments to retention.

The reference (rocketidx.build.incremental, module docstring): a windowed output equals a full build of the log
as it is now; a one-sequence output equals a full build of the log's history (no segment removed) less the files
a broker's retention deletes. Both targets in one build, so each step checks the index and the ConsumeQueues.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from rocketidx.config import build_request
from rocketidx.errors import CorruptRecordError
from rocketidx.ops.build import build
from rocketidx.sample.generate import GenConfig, generate_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from growing_log import World, broker_retention, tree  # noqa: E402

SETTINGS = dict(hash_slot_num=997, index_num=3000, cq_file_size=20_000, timezone="UTC",
                targets="index,consumequeue", in_process=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("growing")
    # Hourly windows over 6 hours, the clock stepping back 2 hours three times: entries of one window in many
    # places of the log, and windows that a segment's removal only partly empties.
    generate_store(root / "store", GenConfig(messages=12_000, segment_bytes=512 * 1024, span_ms=6 * 3_600_000,
                                              clock_steps=3, clock_back_ms=2 * 3_600_000, topics=3, queues=3))
    return str(root / "store" / "commitlog")


def _build(log: str, out: str, window_ms: int, *, full: bool = False, workers: int | None = None):
    return build(build_request(log, out, window_ms=window_ms, full=full, workers=workers, **SETTINGS))


def _output(out: str) -> tuple[dict, dict]:
    return tree(os.path.join(out, "index")), tree(os.path.join(out, "consumequeue"))


def _reference(world: World, tmp: Path, window_ms: int, since: int, deleted: set[str]) -> tuple[dict, dict]:
    """What the output must hold: a windowed one, a full build of the log; a one-sequence one, a full build of
    the log's history since ``since`` (the first segment when the sequence was last built in full) less the
    files a broker's retention deletes, now or at an earlier step (``deleted``, which this adds to: a file
    retention deleted stays deleted, though a rewrite later made it the last of its queue or sequence)."""
    shutil.rmtree(tmp / "ref", ignore_errors=True)
    if window_ms:
        _build(str(tmp / "log"), str(tmp / "ref"), window_ms, full=True)
        return _output(str(tmp / "ref"))
    world.write(str(tmp / "history"), history=True, since=since)
    _build(str(tmp / "history"), str(tmp / "ref"), 0, full=True)
    index, queues = _output(str(tmp / "ref"))
    kept_index, kept_queues = broker_retention(index, queues, world.segments[world.first].base_offset)
    deleted |= {f"index/{k}" for k in index if k not in kept_index}
    deleted |= {f"consumequeue/{k}" for k in queues if k not in kept_queues}
    return ({k: v for k, v in kept_index.items() if f"index/{k}" not in deleted},
            {k: v for k, v in kept_queues.items() if f"consumequeue/{k}" not in deleted})


def _differs(got: tuple[dict, dict], want: tuple[dict, dict]) -> list[str]:
    return [f"{kind}/{k}" for kind, a, b in (("index", got[0], want[0]), ("consumequeue", got[1], want[1]))
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


@pytest.mark.parametrize("window_ms,seed,pieces", [(3_600_000, 1, False), (3_600_000, 2, True), (0, 3, False),
                                                   (0, 4, True)])
def test_random_steps_equal_the_reference(store, tmp_path, monkeypatch, window_ms, seed, pieces):
    """``pieces``: the incremental builds scan the new bytes in pieces of 40,000 bytes on 2 threads
    (rocketidx.commitlog.readers.read_ahead), a dozen pieces to a segment, boundaries inside records."""
    if pieces:
        import rocketidx.commitlog.readers as readers
        monkeypatch.setattr(readers, "PIECE_BYTES", 40_000)
    rng = np.random.default_rng(seed)
    world = World(store)
    log, out = str(tmp_path / "log"), str(tmp_path / "out")
    kinds: dict[str, int] = {}
    incremental = 0
    since = 0  # one sequence: the log's first segment when the output was last built in full
    deleted: set[str] = set()  # one sequence: the files retention deleted since then
    steps = 55
    for step in range(steps):
        r = rng.random()
        if step == 0 or r < 0.45:
            world.grow(int(rng.integers(1, 1500)))
            kind = "grow"
        elif r < 0.6:
            world.grow(int(rng.integers(1500, 4000)))  # past one or more segment ends
            kind = "grow segments"
        elif r < 0.8:
            world.rewrite(int(rng.integers(1, 800)), int(rng.integers(-3, 3)) * 1_800_000, rng)
            kind = "rewrite"
        elif world.retire():
            kind = "retention"
        else:
            kind = "nothing"
        if world.count == world.n:
            world.rewrite(3000, 0, rng)  # keep room to grow
        world.write(log)
        result = _build(log, out, window_ms, workers=2 if pieces else None)
        said = result.summary.incremental or {}
        if "read_from" in said:
            incremental += 1
        elif step:
            # Built in full: only when a one-sequence output's rewritten tail cuts a file after a message the log
            # no longer holds (rocketidx.build.incremental, module docstring); it starts its sequence again.
            assert not window_ms and "no longer holds" in said.get("full", ""), (step, kind, said)
        if "read_from" not in said:
            since, deleted = world.first, set()
        kinds[kind] = kinds.get(kind, 0) + 1
        bad = _differs(_output(out), _reference(world, tmp_path, window_ms, since, deleted))
        assert not bad, f"step {step} ({kind}, {said}): {bad[:5]}"
    assert incremental >= steps - 5, f"only {incremental} of {steps} steps were incremental: {kinds}"
    assert kinds.get("rewrite") and kinds.get("retention"), kinds


def test_verify_judges_a_one_sequence_output_after_retention_and_still_finds_damage(store, tmp_path, capsys):
    """A one-sequence output keeps what a broker keeps after retention: entries of removed messages. verify
    counts them apart (not judged) and is clean; an entry changed above the log's first offset is still caught."""
    from rocketidx.cli import main
    world = World(store)
    log, out = str(tmp_path / "log"), str(tmp_path / "out")
    world.grow(5000)
    world.write(log)
    _build(log, out, 0)
    assert world.retire()
    world.grow(2000)
    world.write(log)
    assert "read_from" in (_build(log, out, 0).summary.incremental or {})
    capsys.readouterr()
    assert main(["verify", "--index", out, "--commitlog", log, "--in-process"]) == 0
    said = capsys.readouterr().out
    assert "point below the CommitLog's first offset" in said and "clean" in said
    assert main(["verify", "--consumequeue", os.path.join(out, "consumequeue"), "--commitlog", log]) == 0
    assert "units stand for messages below the CommitLog's first offset" in capsys.readouterr().out
    # The newest file's last item now points one byte past its message: damage, above the log's first offset.
    import rocketidx.layout as L
    index = Path(out) / "index"
    newest = sorted(index.iterdir())[-1]
    count = int.from_bytes(newest.read_bytes()[36:40], "big")
    at = L.items_offset(SETTINGS["hash_slot_num"]) + (count - 1) * L.INDEX_ITEM.itemsize + 4
    data = bytearray(newest.read_bytes())
    data[at:at + 8] = (int.from_bytes(data[at:at + 8], "big") + 1).to_bytes(8, "big")
    newest.resolve().write_bytes(bytes(data))
    assert main(["verify", "--index", out, "--commitlog", log, "--in-process"]) == 1


@pytest.mark.parametrize("case", ["g4-torn-tail", "g5-corrupt-crc-last-segment"])
def test_a_damaged_log_is_brought_up_to_date_as_a_full_build_reads_it(tmp_path, case):
    """Bad input: a log whose read stops at a torn record or a bad CRC. Run again on the same bytes, nothing
    changed (the stop is judged again, the same). A log whose first record went bad is refused as a full build
    refuses it, and the output stays. Garbage where the read stopped, and a byte flipped in the first segment's
    last record, are found: the output equals a full build of the damaged log."""
    from refdata import GOLDEN
    log, out, ref = tmp_path / "log", str(tmp_path / "out"), tmp_path / "ref"
    shutil.copytree(GOLDEN / case / "commitlog", log)
    _build(str(log), out, 3_600_000)
    again = _build(str(log), out, 3_600_000).summary
    assert again.incremental["why"] == "nothing changed"
    stop = again.stop
    seg = log / stop["segment"]
    data = bytearray(seg.read_bytes())
    data[stop["segment_offset"]:stop["segment_offset"] + 64] = bytes(range(7, 71))  # garbage where it stopped
    seg.write_bytes(bytes(data))
    first = sorted(log.iterdir())[0]
    clean = first.read_bytes()
    body = bytearray(clean)
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    import rocketidx.layout as L
    _, _, first_recs = next(CommitLogReader(list_segments(str(log)), check_crc=False).record_chunks())
    body[int(first_recs[0, L.REC_BODY_POS])] ^= 0xFF  # the log's first record's body: no log, as a full build says
    first.write_bytes(bytes(body))
    before = os.readlink(os.path.join(out, "current"))
    with pytest.raises(CorruptRecordError):
        _build(str(log), out, 3_600_000)
    assert os.readlink(os.path.join(out, "current")) == before
    body = bytearray(clean)
    import json
    read_end = json.loads((Path(out) / "_manifest.json").read_text())["incremental"]["log"][0]["read_end"]
    body[read_end - 100] ^= 0xFF  # in the first segment's last record read (its fingerprinted last 64 KiB)
    first.write_bytes(bytes(body))
    said = _build(str(log), out, 3_600_000).summary.incremental
    assert said.get("read_from") == int(first.name), said
    shutil.rmtree(ref, ignore_errors=True)
    _build(str(log), str(ref), 3_600_000, full=True)
    assert not _differs(_output(out), _output(str(ref)))


def test_a_carried_file_is_copied_only_where_links_are_refused(tmp_path, monkeypatch):
    """A filesystem without hard links gets a copy, counted; a link that fails for another reason (the file is
    there already: a file placed twice) is an error, not a copy over it."""
    import errno
    from rocketidx.build.incremental import Reuse, carry
    src = tmp_path / "src"
    src.write_bytes(b"abc")
    reuse = Reuse(read_from=0, why="")
    carry(str(src), str(tmp_path / "a" / "linked"), reuse)
    assert (tmp_path / "a" / "linked").stat().st_ino == src.stat().st_ino and reuse.copied == 0
    with pytest.raises(FileExistsError):
        carry(str(src), str(tmp_path / "a" / "linked"), reuse)

    def refuse(a, b):
        raise OSError(errno.EXDEV, "cross-device link")
    monkeypatch.setattr(os, "link", refuse)
    carry(str(src), str(tmp_path / "b" / "copied"), reuse)
    assert (tmp_path / "b" / "copied").read_bytes() == b"abc" and reuse.copied == 1
