"""An index given with a CommitLog it was not built from: ``stats`` refuses (exit 2, one line), ``verify``
says so in one line of its report; a log that grew since the build, or a damaged stretch of the right
log, is not another log. And verify's per-file ``problems`` column counts every problem of the file.

Stores from ``gen`` with two seeds (the issue's reproducer, smaller), built in process."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from rocketidx.cli import main
from rocketidx.errors import IndexLogMismatchError
from rocketidx.query.logmatch import match_log, require_index_of_log, sample_positions
from rocketidx.query.lookup import open_index
from rocketidx.stats.in_process import index_stats_local

SIZES = ["--hash-slots", "4096", "--index-num", "8192"]
MORE = re.compile(r"\.\.\. and (\d+) more$")


def gen(out: Path, seed: int) -> Path:
    assert main(["gen", "--out", str(out), "--messages", "4000", "--segment-bytes", "256k", "--span", "4h",
                 "--seed", str(seed)]) == 0
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A and B: two gen stores of different seeds (same shape, same segment names); O: A's index."""
    root = tmp_path_factory.mktemp("match")
    a, b = gen(root / "A", 1), gen(root / "B", 2)
    out = root / "O"
    assert main(["build", "--commitlog", str(a), "--out", str(out), "--in-process", *SIZES]) == 0
    return a, b, out


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(x) for x in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_stats_refuses_another_log_in_one_line(stores, capsys):
    a, b, out = stores
    rc, stdout, err = run(capsys, "stats", "--index", out, "--commitlog", b, "--in-process")
    assert (rc, stdout) == (2, "")
    assert len(err.splitlines()) == 1 and "the index was not built from the CommitLog" in err, err
    assert "sampled entries point at offsets where no message makes their key" in err
    assert "its manifest names the CommitLog" in err and str(a) in err
    rc, stdout, err = run(capsys, "stats", "--index", out, "--commitlog", a, "--in-process")
    assert (rc, err) == (0, "") and "Topics:" in stdout


def test_the_library_refuses_it_too(stores):
    a, b, out = stores
    with pytest.raises(IndexLogMismatchError, match="not built from the CommitLog"):
        index_stats_local(out, b, hash_slot_num=4096, index_num=8192)
    m = require_index_of_log(out, a)
    assert (m.judged, m.matched, m.another_log) == (32, 32, False)


def per_file_listed(problems: list[dict]) -> dict[str, int]:
    """Problems per file name as the listing tells them: a line each, '... and N more' as N."""
    n: dict[str, int] = {}
    for p in problems:
        more = MORE.search(p["detail"])
        name = Path(p["file"]).name
        n[name] = n.get(name, 0) + (int(more.group(1)) if more else 1)
    return n


def test_verify_says_another_log_plainly_and_counts_problems_per_file(stores, capsys):
    a, b, out = stores
    rc, text, err = run(capsys, "verify", "--index", out, "--commitlog", b, "--in-process")
    assert rc == 1 and err == ""
    said = [line for line in text.splitlines() if line.startswith("the index was not built from this CommitLog")]
    assert len(said) == 1 and f"({b})" in said[0] and "sampled entries" in said[0]
    rc, text, _ = run(capsys, "verify", "--index", out, "--commitlog", b, "--in-process", "--json")
    report = json.loads(text)
    assert rc == 1 and report["log_mismatch"] == said[0]
    files = {f["name"]: f["problems"] for f in report["files"]}
    assert all(files.values()) and files == per_file_listed(report["problems"])
    assert sum(files.values()) == sum(report["counts"].values()) > 10_000
    # The table prints the same column.
    rc, text, _ = run(capsys, "verify", "--index", out, "--commitlog", b, "--in-process")
    table = {line.split()[0]: int(line.split()[-1]) for line in text.splitlines()[2:2 + len(files)]}
    assert table == files
    rc, text, _ = run(capsys, "verify", "--index", out, "--commitlog", a, "--in-process", "--json")
    report = json.loads(text)
    assert rc == 0 and report["log_mismatch"] is None and report["clean"]


def test_a_log_that_grew_and_lost_its_oldest_segment_is_the_same_log(stores, tmp_path, capsys):
    """Built while A had its first 5 segments; checked once A has all of them less the first."""
    a, _, _ = stores
    segs = sorted((a / "commitlog").iterdir())
    assert len(segs) >= 8
    then, now = tmp_path / "then", tmp_path / "now"
    for d, keep in ((then, segs[:5]), (now, segs[1:])):
        (d / "commitlog").mkdir(parents=True)
        for s in keep:
            shutil.copy(s, d / "commitlog" / s.name)
    out = tmp_path / "out"
    assert main(["build", "--commitlog", str(then), "--out", str(out), "--in-process", *SIZES]) == 0
    capsys.readouterr()
    m = match_log(open_index(out), now)
    assert m.judged >= 20 and m.matched == m.judged and not m.another_log  # entries in segment 0: not judged
    rc, _, err = run(capsys, "stats", "--index", out, "--commitlog", now, "--in-process")
    assert (rc, err) == (0, "")
    rc, text, _ = run(capsys, "verify", "--index", out, "--commitlog", now, "--in-process", "--json")
    assert json.loads(text)["log_mismatch"] is None


def test_a_damaged_stretch_of_the_right_log_is_not_another_log(stores, tmp_path):
    """The issue's reproducer 3 in small: garbage in the middle of a segment."""
    a, _, out = stores
    damaged = tmp_path / "A"
    shutil.copytree(a, damaged)
    seg = sorted((damaged / "commitlog").iterdir())[1]
    with open(seg, "r+b") as f:
        f.seek(100_000)
        f.write(b"GARBAGEGARBAGE")
    m = match_log(open_index(out), damaged)
    assert m.judged == 32 and not m.another_log


def test_segments_swapped_put_offsets_elsewhere_and_give_no_verdict(stores, tmp_path):
    """Entries point at PHYSICALOFFSET fields; in a log whose segments were swapped those are not
    positions, so the sample cannot judge (the build and verify see the same fields)."""
    a, _, out = stores
    swapped = tmp_path / "A"
    shutil.copytree(a, swapped)
    s0, s1 = sorted((swapped / "commitlog").iterdir())[:2]
    b0, b1 = s0.read_bytes(), s1.read_bytes()
    s0.write_bytes(b1)
    s1.write_bytes(b0)
    m = match_log(open_index(out), swapped)
    assert m.fields_out_of_place and not m.another_log


def test_sample_positions_spread_over_every_file():
    assert sample_positions([0, 0]) == []
    assert sample_positions([3, 0, 2]) == [(0, 1), (0, 2), (0, 3), (2, 1), (2, 2)]
    picks = sample_positions([1000, 10, 1000], 8)
    assert len(picks) == 8 and {f for f, _ in picks} == {0, 2} and picks[0] == (0, 1) and picks[-1] == (2, 1000)
