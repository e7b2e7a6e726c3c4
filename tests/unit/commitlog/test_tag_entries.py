"""A 5.4+ broker's index: every scenario's entries with the tag entry (``topic#T#TAGS``, last, whole,
none for an empty TAGS or a rollback), on both paths; and the release a ``--broker-version`` names."""
from __future__ import annotations

import re

import pytest

from scenarios import KNOWN_TEXT_BUGS, SCENARIOS, VALID
from rocketidx.commitlog.entries import entries_from_records, extract_entries, index_rules, tag_entries_on
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import broker_release
from rocketidx.errors import ConfigError
import rocketidx.layout as L

from test_messages import keys_per_row, read_store

NAMES = [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_TEXT_BUGS[n]))
         if n in KNOWN_TEXT_BUGS else n for n in VALID]


def with_tag(row: dict, keys: tuple[str, ...]) -> tuple[str, ...]:
    rollback = (row["sys_flag"] & L.SYSFLAG_TX_MASK) == L.SYSFLAG_TX_ROLLBACK
    if rollback or not row["tags"]:
        return keys
    return keys + (f"{row['topic']}#T#{row['tags']}",)


@pytest.mark.parametrize("name", NAMES)
def test_a_5_4_broker_indexes_the_whole_tags_after_the_keys(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    table, _ = read_store(sc.write(tmp_path), reader_native)
    with index_rules(True):
        got = keys_per_row(table)
    assert got == [with_tag(r, k) for r, k in zip(sc.expected_rows(), sc.expected_index_keys())]
    assert keys_per_row(table) == sc.expected_index_keys()  # the rule ends with the block


@pytest.mark.parametrize("name", VALID)
def test_the_build_path_makes_the_tag_entries_too(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    table, _ = read_store(sc.write(tmp_path), False)
    with index_rules(True):
        reader = CommitLogReader(list_segments(sc.write(tmp_path)), native=reader_native)
        got = [e for *_, batch in reader.entry_chunks() for e in batch.to_pylist()]
        expected = extract_entries(table).to_pylist()
        records = [e for seg, buf, recs in CommitLogReader(list_segments(sc.write(tmp_path)),
                                                           native=reader_native).record_chunks()
                   for e in entries_from_records(buf, seg, recs, native=reader_native).to_pylist()]
    assert got == expected == records


def test_a_tag_with_separators_is_one_entry(tmp_path):
    """TAGS is indexed whole: ``a||b`` and ``x y`` make one entry each (5.5.0 IndexService.java:267-277)."""
    import pyarrow as pa
    from rocketidx.commitlog.columns import MESSAGE_SCHEMA
    from rocketidx.commitlog.entries import extract_entry_keys
    rows = [dict.fromkeys(MESSAGE_SCHEMA.names) for _ in range(3)]
    for r, tags in zip(rows, ["a||b", "x y", ""]):
        r.update(topic="T", tags=tags, keys="k1 k2", uniq_key="U", sys_flag=0)
    table = pa.Table.from_pylist(rows, MESSAGE_SCHEMA)
    with index_rules(True):
        _, seq, keys = extract_entry_keys(table)
    assert keys.to_pylist() == ["T#U", "T#k1", "T#k2", "T#T#a||b"] + ["T#U", "T#k1", "T#k2", "T#T#x y"] + \
        ["T#U", "T#k1", "T#k2"]
    assert seq.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2]


@pytest.mark.parametrize("text,line,tags", [
    (None, "5.x", False), ("5.x", "5.x", False), ("5", "5.x", False), ("5.3.3", "5.x", False),
    ("5.4.0", "5.x", True), ("5.5", "5.5.x", True), ("v5.5.0", "5.5.x", True), ("rocketmq-all-5.5.0", "5.5.x", True),
    ("4.9.8", "4.9.x", False), ("4.9.x", "4.9.x", False)])
def test_broker_version_names_the_rules(text, line, tags):
    r = broker_release(text)
    assert (r.line, r.tag_entries) == (line, tags)
    assert ("no --broker-version" in r.rules) == (text is None)


@pytest.mark.parametrize("text", ["6.0", "five", "5.a", ""])
def test_an_unknown_release_is_refused(text):
    with pytest.raises(ConfigError, match="--broker-version"):
        broker_release(text)


def test_the_rule_is_off_outside_a_command():
    assert not tag_entries_on()


@pytest.fixture(scope="module")
def two_stores(tmp_path_factory):
    """The same generated log indexed as a 5.3 broker and as a 5.5 broker would: (store53, store55)."""
    from rocketidx.build.in_process import build_index
    from rocketidx.sample.generate import GenConfig, generate_store
    from rocketidx.config import BuildConfig
    root = tmp_path_factory.mktemp("rules")
    stores = []
    for name, tags in (("s53", False), ("s55", True)):
        store = root / name
        generate_store(store / "commitlog", GenConfig(messages=3000, segment_bytes=1 << 20, seed=5))
        with index_rules(tags):
            build_index(str(store / "commitlog"), str(root / f"{name}-out"),
                        BuildConfig(hash_slot_num=101, index_num=4000, window_ms=0))
        (store / "index").mkdir()
        for f in sorted((root / f"{name}-out" / "index").iterdir()):
            (store / "index" / f.name).write_bytes(f.read_bytes())
        stores.append(store)
    return stores


@pytest.mark.parametrize("store_tags,given_tags", [(False, True), (True, False)])
def test_a_store_written_by_the_other_release_is_refused_naming_its_file(two_stores, store_tags, given_tags):
    from rocketidx.index.reader import IndexFile
    from rocketidx.verify.rules import check_index_rules, tag_entries_seen
    store = two_stores[store_tags]
    files = [IndexFile(p, 101, 4000) for p in sorted((store / "index").iterdir())]
    seen, path, looked, hits = tag_entries_seen(files, str(store / "commitlog"))
    assert seen is store_tags and looked >= 100 and hits == (looked if store_tags else 0)
    check_index_rules(files, str(store / "commitlog"), store_tags)  # the right rules: no word
    with pytest.raises(ConfigError, match=f"{path}.*--broker-version"):
        check_index_rules(files, str(store / "commitlog"), given_tags)


def test_verify_store_and_backfill_refuse_in_one_line(two_stores, capsys):
    from rocketidx.cli import main
    store55 = str(two_stores[1])
    for argv in (["verify", "--store", store55, "--hash-slots", "101", "--index-num", "4000"],
                 ["backfill", "--store", store55, "--hash-slots", "101", "--index-num", "4000", "--dry-run"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds 5.4+ tag entries" in err[0] and "--broker-version 5.5.0" in err[0]
    # with the release named, the index is judged (clean); the queues, never built here, a clean restart
    # dispatches again from the log's start, so nothing is lost
    assert main(["verify", "--store", store55, "--hash-slots", "101", "--index-num", "4000",
                 "--broker-version", "5.5.0"]) == 0
    out = capsys.readouterr().out
    assert "index: clean" in out and "consumequeue: clean" in out
    assert re.search(r"the queues lack ([\d,]+) entries: the restart restores \1, 0 stay lost", out)


def test_a_5_5_crash_restart_starts_at_the_checkpoints_logics_physical_offset():
    """5.5.0 recoverAbnormally: the newest segment whose first record is at or below logicsPhysicalOffset
    (byte 40 of the checkpoint), else by logicsMsgTimestamp; never more than 10 segments back."""
    from types import SimpleNamespace
    from rocketidx.verify.restart import BrokerSwitches, restart_model
    segs = [SimpleNamespace(base_offset=i * 1000) for i in range(14)]
    first_ts = {s.base_offset: 10_000 + s.base_offset for s in segs}

    def model(version, **cp):
        cp = {"physic_msg_timestamp_ms": 0, "logics_msg_timestamp_ms": 0, "index_msg_timestamp_ms": 0, **cp}
        return restart_model(abort=True, version=version, switches=BrokerSwitches(), queues_end=13_500, segments=segs,
                             log_end=14_000, checkpoint=cp, index_files=[],
                             first_store_time=lambda seg: first_ts[seg.base_offset])

    assert model("5.5.x", logics_physical_offset=12_400).redispatch_from == 12_000
    assert model("5.5.x", logics_physical_offset=0, logics_msg_timestamp_ms=10_000 + 11_500).redispatch_from == 11_000
    far = model("5.5.x", logics_physical_offset=1)  # no segment of the last 10 qualifies: the 10th back
    assert far.redispatch_from == 4_000 and "10 segments" in far.how
    # 8fc57f1: min(physic, logics) - 3 s, any distance back (physic 0 here: the first segment)
    assert model("5.x", logics_physical_offset=12_400, logics_msg_timestamp_ms=99_999).redispatch_from == 0


def test_the_jobs_follow_the_release_they_are_given(two_stores, tmp_path):
    """The operations hold the release's rules themselves: ``jobs/nightly_rebuild.py`` and ``jobs/backfill.py``
    (run by python, so in process at this size) with ``--broker-version 5.5.0`` write the tag entries, as the
    command line does. Before, only the command line's main set them: the nightly job wrote 5.3's index under
    a summary that said 5.5.0's rules."""
    import importlib.util
    import shutil
    from pathlib import Path
    jobs = Path(__file__).resolve().parents[3] / "jobs"

    def job(name):
        spec = importlib.util.spec_from_file_location(f"job_{name}", jobs / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.main

    store53, store55 = two_stores
    out = tmp_path / "nightly"
    assert job("nightly_rebuild")(["--commitlog", str(store55 / "commitlog"), "--out", str(out), "--hash-slots",
                                   "101", "--index-num", "4000", "--window", "0", "--broker-version", "5.5.0"]) == 0
    assert [p.read_bytes() for p in sorted((out / "index").iterdir())] == \
        [p.read_bytes() for p in sorted((store55 / "index").iterdir())]
    lost = tmp_path / "store"
    shutil.copytree(store55 / "commitlog", lost / "commitlog")
    assert job("backfill")(["--store", str(lost), "--targets", "index", "--hash-slots", "101", "--index-num", "4000",
                            "--broker-version", "5.5.0"]) == 0
    assert [p.read_bytes() for p in sorted((lost / "index").iterdir())] == \
        [p.read_bytes() for p in sorted((store55 / "index").iterdir())]
