"""``rocketidx gen`` / ``build`` / ``query`` end to end through ``rocketidx.cli.main``; the sample store's
shape (checked with an independent walker); the manifest; and the output commit (``_SUCCESS``, atomic
replacement, the lock)."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from scenarios import SCENARIOS, java_index_keys, java_key_hash, walk_segment
from rocketidx import cli
from rocketidx.build.in_process import build_index
from rocketidx.config import BuildConfig
from rocketidx.errors import StoreLayoutError, StoreLockedError
from rocketidx.query.lookup import open_index, query_offsets

GEN_ARGS = ["--messages", "600", "--segment-bytes", "16384", "--body-bytes", "120", "--topics", "3",
            "--keys-per-message", "3", "--span", "6h", "--seed", "11"]
FILE_FIELDS = {"name", "window_start_ms", "seq", "begin_timestamp", "end_timestamp", "begin_phy_offset",
               "end_phy_offset", "hash_slot_count", "index_count"}


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def gen(capsys, out: Path, *extra) -> dict:
    rc, stdout, err = run(capsys, "gen", "--out", out, *GEN_ARGS, "--json", *extra)
    assert rc == 0, err
    return json.loads(stdout)


def segment_files(store: Path) -> list[Path]:
    return sorted((store / "commitlog").iterdir())


def walk_store(store: Path) -> list[tuple[str, list, int, str]]:
    out = []
    for p in segment_files(store):
        data = p.read_bytes()
        recs, pos, kind = walk_segment(data)
        out.append((p.name, recs, pos, kind))
    return out


def expected_entries(store: Path) -> list[tuple[str, int, int]]:
    """(key, phy_offset, store_ts) of every entry, in CommitLog order, from the independent walker."""
    entries = []
    for _, recs, _, _ in walk_store(store):
        for r in recs:
            for key in java_index_keys(r.topic.decode(), r.properties.decode(), r.sys_flag):
                entries.append((key, r.phy_offset, r.store_timestamp_ms))
    return entries


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gen") / "store"
    rc = cli.main(["gen", "--out", str(d), *GEN_ARGS])
    assert rc == 0
    return d


# --- gen -----------------------------------------------------------------------------------------------

def test_gen_is_deterministic_for_a_seed(tmp_path, capsys):
    a = gen(capsys, tmp_path / "a")
    b = gen(capsys, tmp_path / "b")
    assert a["messages"] == b["messages"] == 600
    fa, fb = segment_files(tmp_path / "a"), segment_files(tmp_path / "b")
    assert [p.name for p in fa] == [p.name for p in fb]
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(fa, fb))
    gen(capsys, tmp_path / "c", "--seed", "12")
    assert [p.read_bytes() for p in segment_files(tmp_path / "c")] != [p.read_bytes() for p in fa]


def test_gen_writes_valid_records_blank_records_at_segment_ends_and_a_zero_tail(store):
    walked = walk_store(store)
    assert len(walked) > 3
    size = 16384
    for i, (name, recs, pos, kind) in enumerate(walked):
        data = (store / "commitlog" / name).read_bytes()
        assert len(data) == size
        assert int(name) == i * size
        assert all(r.phy_offset == int(name) + r.segment_offset for r in recs)
        assert all(r.magic in (0xDAA320A7, 0xDAA320AB) for r in recs)
        if i < len(walked) - 1:
            assert kind == "blank", name
            total = int.from_bytes(data[pos:pos + 4], "big")
            assert total == size - pos
            assert data[pos + 8:] == bytes(size - pos - 8)
        else:
            assert kind == "zero"
            assert data[pos:] == bytes(size - pos)
    assert sum(len(r) for _, r, _, _ in walked) == 600


def test_gen_ends_every_segment_but_the_last_with_a_blank_record_as_doappend_does(tmp_path, capsys):
    """doAppend puts a message only when at least 8 bytes stay free after it, so a blank record
    always closes a full segment. With 4 KiB segments, seed 1 makes a record fill a segment exactly."""
    rc, _, err = run(capsys, "gen", "--out", tmp_path, "--messages", "400", "--segment-bytes", "4096",
                     "--body-bytes", "40", "--seed", "1")
    assert rc == 0, err
    for name, _, pos, kind in walk_store(tmp_path)[:-1]:
        assert kind == "blank", f"{name}: no blank record, the last record ends at {pos}"


def test_gen_body_crcs_are_crc32_masked(store):
    import zlib
    for _, recs, _, _ in walk_store(store):
        for r in recs:
            assert r.body_crc == zlib.crc32(r.body) & 0x7FFFFFFF


# --- build -------------------------------------------------------------------------------------------

def test_build_of_a_generated_store_indexes_every_message(store, tmp_path, capsys):
    rc, out, err = run(capsys, "build", "--commitlog", store, "--out", tmp_path / "out", "--hash-slots", 101,
                       "--index-num", 200, "--window", "1h", "--timezone", "UTC", "--json")
    assert rc == 0, err
    summary = json.loads(out)
    walked = walk_store(store)
    messages = [r for _, recs, _, _ in walked for r in recs]
    expected = expected_entries(store)
    non_rollback = [r for r in messages if r.sys_flag & 0xC != 0xC]
    assert summary["messages"] == len(messages) == 600
    assert summary["rollback_skipped"] == len(messages) - len(non_rollback)
    assert summary["entries"] == len(expected)
    assert summary["stop"]["kind"] == "end_of_data"
    assert summary["stop"]["segment"] == walked[-1][0]
    assert summary["stop"]["segment_offset"] == walked[-1][2]
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert sum(f["index_count"] - 1 for f in manifest["files"]) == len(expected)
    assert manifest["entries"] == len(expected) and manifest["messages"] == 600


# --- what the build's summary says (issue 31 items 11, 12, 22) ---------------------------------------------

SMALL = ["--hash-slots", 101, "--index-num", 200, "--timezone", "UTC", "--in-process"]


@pytest.mark.parametrize("lo, hi", [(16384 + 3000, 16384 + 9000), (16384 + 5000, 3 * 16384 + 7000)])
def test_a_range_build_reports_the_bytes_of_its_range_not_of_its_segments(store, tmp_path, capsys, lo, hi):
    """Item 11: a range build said "bytes 12,891,238 ... read 10,000,000 of the log's 12,891,238 bytes": the
    bytes from its first segment's start. Its bytes are the range's, in each segment up to where reading
    ended there (a blank record pads the rest), by the independent walker."""
    covered = sum(max(0, min(int(name) + end, hi) - max(int(name), lo)) for name, _, end, _ in walk_store(store))
    assert covered == hi - lo or lo // 16384 != hi // 16384
    rc, out, err = run(capsys, "build", "--commitlog", store, "--out", tmp_path / "o", "--from-offset", lo,
                       "--to-offset", hi, *SMALL)
    assert rc == 0, err
    assert f"  bytes {covered:,}  " in out.splitlines()[0] and " of these " not in out, out
    assert json.loads((tmp_path / "o" / "_manifest.json").read_text())["bytes_read"] == covered
    rc, out, err = run(capsys, "build", "--commitlog", store, "--out", tmp_path / "o", "--from-offset", lo,
                       "--to-offset", hi, *SMALL, "--json")
    assert (json.loads(out)["bytes_read"], json.loads(out)["bytes_scanned"]) == (covered, covered)


def test_a_queue_only_build_prints_the_queue_counters_not_the_index_zeros(store, tmp_path, capsys):
    """Item 12: ``--targets consumequeue`` printed ``entries 0  windows 0  files 0 ... 0.00 M entries/s``."""
    rc, out, err = run(capsys, "build", "--commitlog", store, "--out", tmp_path / "o", "--targets", "consumequeue",
                       *SMALL)
    assert rc == 0, err
    first, queues = out.splitlines()[:2]
    cq = json.loads((tmp_path / "o" / "_manifest.json").read_text())["consumequeues"]
    assert "entries 0" not in first and "windows" not in first and "M queue entries/s" in first, first
    assert queues.startswith(f"consumequeues: {len(cq['queues'])} queues") and f"{cq['entries']:,} entries" in queues


def test_a_whole_build_says_it_read_to_the_end_of_the_log_and_an_early_stop_says_early(store, tmp_path, capsys):
    """Item 22: a normal build ended with ``reading stopped: ... end of data (zero TOTALSIZE, zero tail)``,
    which reads like an error. A zero TOTALSIZE before the newest segment is a real early stop."""
    name, _, end, _ = walk_store(store)[-1]
    rc, out, err = run(capsys, "build", "--commitlog", store, "--out", tmp_path / "o", *SMALL)
    assert rc == 0 and err == "", err
    assert f"read to the end of the log at {name} + {end} (offset {int(name) + end}): " in out
    assert "reading stopped" not in out
    damaged = tmp_path / "damaged"
    shutil.copytree(store, damaged)
    second = segment_files(damaged)[1]
    second.write_bytes(bytes(4) + second.read_bytes()[4:])  # TOTALSIZE 0 at the start of the second segment
    rc, out, err = run(capsys, "build", "--commitlog", damaged, "--out", tmp_path / "o2", *SMALL)
    assert rc == 0 and f"reading stopped early at {second.name} + 0 " in out and "reading stopped early" in err
    assert "end of the log" not in out


def test_manifest_has_the_documented_fields(store, tmp_path):
    manifest, summary = build_index(store, tmp_path / "out", BuildConfig(hash_slot_num=101, index_num=50,
                                                                         window_ms=3_600_000, timezone="UTC"))
    on_disk = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert on_disk == manifest
    assert {"messages", "entries", "stop", "files", "hash_slot_num", "index_num", "window_ms"} <= set(manifest)
    assert {"segment", "segment_offset", "phy_offset", "kind", "reason"} <= set(manifest["stop"])
    assert manifest["files"]
    for f in manifest["files"]:
        assert FILE_FIELDS <= set(f), FILE_FIELDS - set(f)
        assert (tmp_path / "out" / "index" / f["name"]).stat().st_size == 40 + 4 * 101 + 20 * 50
        assert f["entries"] == f["index_count"] - 1
    names = [f["name"] for f in manifest["files"]]
    assert names == sorted(names) and len(set(names)) == len(names)
    keys = [(f["window_start_ms"], f["seq"]) for f in manifest["files"]]
    assert keys == sorted(keys)
    assert manifest["entries"] == summary.entries == sum(f["entries"] for f in manifest["files"])
    assert summary.files == len(manifest["files"])


def test_build_then_query_end_to_end_through_the_cli(store, tmp_path, capsys):
    out = tmp_path / "out"
    rc, _, err = run(capsys, "build", "--commitlog", store, "--out", out, "--hash-slots", 53,
                     "--index-num", 97, "--window", "1h", "--timezone", "UTC")
    assert rc == 0, err
    entries = expected_entries(store)
    wanted = sorted({k for k, _, _ in entries})[::17] + ["Topic0#no-such-key"]
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"topic": k.split("#", 1)[0], "key": k.split("#", 1)[1]}) + "\n"
                               for k in wanted))
    rc, stdout, err = run(capsys, "query", "--index", out, "--queries", queries)
    assert rc == 0, err
    answers = [json.loads(line) for line in stdout.splitlines()]
    assert len(answers) == len(wanted)
    for key, ans in zip(wanted, answers):
        assert f"{ans['topic']}#{ans['key']}" == key
        h = java_key_hash(key)
        # store times increase with the CommitLog here, so newest first is reverse CommitLog order
        expected = [phy for k, phy, _ in reversed(entries) if java_key_hash(k) == h][:64]
        assert ans["offsets"] == expected, key
    assert answers[-1]["offsets"] == []


def test_query_of_one_key_through_the_cli_and_the_library_agree(store, tmp_path, capsys):
    out = tmp_path / "out"
    build_index(store, out, BuildConfig(hash_slot_num=53, index_num=97, timezone="UTC"))
    key = expected_entries(store)[0][0]
    topic, k = key.split("#", 1)
    rc, stdout, err = run(capsys, "query", "--index", out, "--topic", topic, "--key", k, "--max", 3)
    assert rc == 0, err
    ans = json.loads(stdout)
    assert ans["offsets"] == query_offsets(open_index(out), topic, k, max_num=3)
    assert 0 < len(ans["offsets"]) <= 3


def test_query_without_a_key_exits_2(tmp_path, capsys):
    rc, _, err = run(capsys, "query", "--index", tmp_path)
    assert rc == 2 and err.strip()


# --- output commit -------------------------------------------------------------------------------------

def _versions(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith(".v-"))


CFG = BuildConfig(hash_slot_num=11, index_num=16, window_ms=0, timezone="UTC")


def test_success_marker_exists_after_a_build(tmp_path):
    build_index(SCENARIOS["many_keys"].write(tmp_path / "s"), tmp_path / "out", CFG)
    assert (tmp_path / "out" / "_SUCCESS").exists()
    assert (tmp_path / "out" / "_manifest.json").exists()
    assert len(_versions(tmp_path / "out")) == 1


def test_a_second_build_replaces_the_first_and_removes_the_old_version(tmp_path):
    out = tmp_path / "out"
    m1, _ = build_index(SCENARIOS["many_keys"].write(tmp_path / "s1"), out, CFG)
    [v1] = _versions(out)
    seen_during: list[tuple] = []

    def during(_reader):  # called while the second build runs: readers still see the first, whole
        manifest = json.loads((out / "_manifest.json").read_text())
        seen_during.append((manifest["entries"], all((out / "index" / f["name"]).exists()
                                                    for f in manifest["files"])))

    m2, _ = build_index(SCENARIOS["ipv4_v1"].write(tmp_path / "s2"), out, CFG, progress=during)
    assert seen_during and all(s == (m1["entries"], True) for s in seen_during)
    [v2] = _versions(out)
    assert v2 != v1 and not (out / v1).exists()
    assert json.loads((out / "_manifest.json").read_text()) == m2
    assert os.path.realpath(out / "index").startswith(str((out / v2).resolve()))
    assert sorted(os.listdir(out / "index")) == sorted(f["name"] for f in m2["files"])
    assert (out / "_SUCCESS").exists()


def test_a_leftover_version_from_a_crashed_build_is_removed_by_the_next(tmp_path):
    out = tmp_path / "out"
    build_index(SCENARIOS["many_keys"].write(tmp_path / "s"), out, CFG)
    (out / ".v-crashed00000" / "index").mkdir(parents=True)
    build_index(SCENARIOS["many_keys"].write(tmp_path / "s"), out, CFG)
    assert len(_versions(out)) == 1 and not (out / ".v-crashed00000").exists()


def test_a_build_while_another_holds_the_lock_raises_store_locked_error(tmp_path, capsys):
    out = tmp_path / "out"
    store = SCENARIOS["many_keys"].write(tmp_path / "s")
    build_index(store, out, CFG)
    before = json.loads((out / "_manifest.json").read_text())
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StoreLockedError) as e:
            build_index(store, out, CFG)
        assert str(out) in str(e.value)
        rc, _, err = run(capsys, "build", "--commitlog", store, "--out", out)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and str(out) in err and "Traceback" not in err
    finally:
        os.close(fd)
    assert json.loads((out / "_manifest.json").read_text()) == before  # untouched
    build_index(store, out, CFG)  # released: builds again


def test_an_output_directory_holding_foreign_files_is_refused(tmp_path):
    out = tmp_path / "out"
    (out / "index").mkdir(parents=True)
    (out / "index" / "mine").write_text("not rocketidx")
    with pytest.raises(StoreLayoutError) as e:
        build_index(SCENARIOS["many_keys"].write(tmp_path / "s"), out, CFG)
    assert str(out / "index") in str(e.value)
    assert (out / "index" / "mine").read_text() == "not rocketidx"
