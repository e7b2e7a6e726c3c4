"""Issue 12: wrong input fails the right way, on the command line (points 5 and 9).

Each case is what a new user tried: it must end with the documented exit code and one line on stderr
naming the path, never a traceback, never a silent success."""
from __future__ import annotations

import json
import shutil

import pytest

from rocketidx.cli import main
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.commitlog.records import scan_records
from rocketidx.commitlog.segments import list_segments, open_segment
import rocketidx.layout as L

SIZES = ["--hash-slots", "101", "--index-num", "400", "--timezone", "UTC"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    generate_store(root / "store", GenConfig(messages=3000, segment_bytes=256 * 1024, span_ms=3_600_000, seed=4))
    assert main(["build", "--commitlog", str(root / "store"), "--out", str(root / "out"), "--in-process"] + SIZES) == 0
    return root


def test_a_file_deleted_from_an_output_is_damage_verify_reports(built, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(built / "out", out, symlinks=True)
    victim = sorted((out / "index").iterdir())[1]
    victim.unlink()
    assert main(["verify", "--index", str(out), "--in-process"]) == 1
    text = capsys.readouterr().out
    assert victim.name in text and "missing-file" in text


def test_an_empty_directory_is_not_a_clean_index(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["verify", "--index", str(tmp_path / "empty")]) == 2
    assert "no IndexFiles found" in capsys.readouterr().err
    assert main(["query", "--index", str(tmp_path / "empty"), "--topic", "T", "--key", "k"]) == 2
    assert "no IndexFiles found" in capsys.readouterr().err


def test_random_bytes_are_not_a_commitlog_and_nothing_is_committed(tmp_path, capsys):
    (tmp_path / "store" / "commitlog").mkdir(parents=True)
    seg = tmp_path / "store" / "commitlog" / ("0" * 20)
    seg.write_bytes(bytes(range(256)) * 4096)
    assert main(["build", "--commitlog", str(tmp_path / "store"), "--out", str(tmp_path / "out"), "--in-process"]
                + SIZES) == 2
    err = capsys.readouterr().err
    assert "not one valid record" in err and str(seg) in err and "@ byte 0" in err
    assert not (tmp_path / "out" / "current").exists()


def test_a_corrupt_segment_mid_log_is_said_on_stderr_and_strict_fails(built, tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(built / "store", store)
    seg = list_segments(store / "commitlog")[2]
    recs = next(scan_records(open_segment(seg), seg, 0, seg.size, check_crc=False))
    with open(seg.path, "r+b") as f:
        f.seek(int(recs[3, L.REC_BODY_POS]))
        f.write(b"\xde\xad")
    args = ["build", "--commitlog", str(store), "--out", str(tmp_path / "out"), "--in-process", "--json"] + SIZES
    assert main(args) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["stop"]["kind"] == "corrupt" and summary["unread_segments"] == len(list_segments(store)) - 3
    assert summary["unread_bytes"] > 0 and "reading stopped early" in captured.err and seg.name in captured.err
    assert main(args + ["--strict"]) == 1
    assert main(["build", "--commitlog", str(built / "store"), "--out", str(tmp_path / "ok"), "--in-process",
                 "--strict"] + SIZES) == 0  # the newest segment's zero tail is the normal end


@pytest.mark.parametrize("args, says", [
    (["--max", "0"], "--max must be at least 1"),
    (["--max", "-5"], "--max must be at least 1"),
    (["--queries", "q.jsonl"], "exclude each other"),
    (["--store", "."], "--index and --store"),
])
def test_query_arguments_that_cannot_apply_are_rejected(built, capsys, args, says):
    base = ["query", "--index", str(built / "out"), "--topic", "Topic0", "--key", "k"]
    assert main(base + args) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("line, says", [
    ('{"topic": "Topic0"}', "not a lookup"),  # no key: was a KeyError traceback
    ("[1, 2]", "not a lookup"),  # not an object: was an AttributeError traceback
    ('{"topic": 5, "key": "k"}', "not a lookup"),  # a number is not a topic
    ("not json", "not JSON"),
    ('{"topic": "Topic0", "key": "k", "begin": "yesterday"}', "begin='yesterday'"),
    ('{"topic": "Topic0", "key": "k", "maxNum": 0}', "maxNum=0"),
])
def test_a_bad_line_of_a_queries_file_is_one_line_naming_the_file_and_line(built, tmp_path, capsys, line, says):
    """Issue 31 item 6: as ``query --consumequeue --queries`` does, exit 2 and one line, before any answer."""
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"topic": "Topic0", "key": "K1"}\n\n' + line + "\n")
    assert main(["query", "--index", str(built / "out"), "--queries", str(queries)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"rocketidx query: ") and f"{queries} line 3: " in err and says in err, err


def test_gen_with_a_tiny_segment_is_a_clear_error(tmp_path, capsys):
    assert main(["gen", "--out", str(tmp_path / "s"), "--messages", "10", "--segment-bytes", "100"]) == 2
    assert "segment_bytes" in capsys.readouterr().err


def test_a_bogus_master_and_an_out_that_is_a_file_are_one_line_errors(built, tmp_path, capsys):
    base = ["build", "--commitlog", str(built / "store")] + SIZES
    assert main(base + ["--out", str(tmp_path / "o"), "--master", "bogus://x"]) == 2  # before any JVM starts
    err = capsys.readouterr().err
    assert "not a Spark master" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "afile").write_text("x")
    assert main(base + ["--out", str(tmp_path / "afile"), "--in-process"]) == 2
    err = capsys.readouterr().err
    assert "is not a directory" in err and str(tmp_path / "afile") in err


def test_verify_of_segments_swapped_out_of_order_reports_not_crashes(built, tmp_path, capsys):
    """Point 2: two segments' contents swapped (names no longer match their bytes)."""
    store = tmp_path / "store"
    shutil.copytree(built / "store", store)
    a, b = [s.path for s in list_segments(store / "commitlog")[:2]]
    shutil.move(a, a + ".x")
    shutil.move(b, a)
    shutil.move(a + ".x", b)
    code = main(["verify", "--index", str(built / "out"), "--commitlog", str(store), "--in-process"])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err and "problem" in captured.out.lower()


def test_a_truncated_first_segment_is_blamed_not_the_next(built, tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(built / "store", store)
    first = list_segments(store / "commitlog")[0]
    with open(first.path, "r+b") as f:
        f.truncate(1000)
    assert main(["build", "--commitlog", str(store), "--out", str(tmp_path / "out"), "--in-process"] + SIZES) == 2
    err = capsys.readouterr().err
    assert first.name in err and "segment size 1000" in err and "gap" not in err


def test_one_truncated_file_in_a_bare_directory_is_the_only_one_flagged(built, tmp_path, capsys):
    """The sizes come from the size most files share, so the healthy files stay healthy."""
    bare = tmp_path / "bare"
    shutil.copytree(built / "out" / "index", bare)
    names = sorted(p.name for p in bare.iterdir())
    assert len(names) >= 3
    with open(bare / names[1], "r+b") as f:
        f.truncate(3000)
    assert main(["verify", "--index", str(bare), "--json"]) == 1
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    flagged = {p["file"].rsplit("/", 1)[-1] for p in report["problems"]}
    assert flagged == {names[1]} and report["counts"] == {"size": 1}
    assert main(["query", "--index", str(bare), "--topic", "T", "--key", "k"]) == 2
    err = capsys.readouterr().err
    assert names[1] in err and "file size 3000" in err and len(err.strip().splitlines()) == 1


def test_a_store_without_index_passed_as_an_index_says_so(built, capsys):
    for cmd in (["verify", "--index"], ["query", "--topic", "T", "--key", "k", "--index"], ["stats", "--index"]):
        assert main(cmd + [str(built / "store")]) == 2
        err = capsys.readouterr().err
        assert "no index/ directory" in err and "generator.json" not in err, err


def test_a_missing_path_reads_the_same_in_every_command(tmp_path, capsys):
    missing = str(tmp_path / "nope")
    for cmd in (["verify", "--index", missing], ["query", "--topic", "T", "--key", "k", "--index", missing],
                ["stats", "--index", missing], ["build", "--commitlog", missing, "--out", str(tmp_path / "o")]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert f"{missing}: no such directory" in err and len(err.strip().splitlines()) == 1, (cmd, err)


def test_a_bare_number_window_is_milliseconds_as_help_says(built, tmp_path, capsys):
    assert main(["build", "--commitlog", str(built / "store"), "--out", str(tmp_path / "out"), "--in-process",
                 "--window", "1800000", "--json"] + SIZES) == 0
    assert json.loads(capsys.readouterr().out)["windows"] == 3  # one hour of messages in half hours
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "bare number of milliseconds" in " ".join(capsys.readouterr().out.split())
