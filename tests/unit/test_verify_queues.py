"""verify --consumequeue: a damage campaign over reference ConsumeQueue files. With the CommitLog every damage is
reported by its kind; the files alone catch what the files can show; a clean build is always clean."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from refdata import GOLDEN_CASES

from rocketidx.build.local import build_index
from rocketidx.cli import main
from rocketidx.config import BuildConfig
from rocketidx.verify.queues import verify_consumequeues

CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]
UNIT = 20


def queues_of(root: Path) -> list[Path]:
    return sorted(q for t in root.iterdir() for q in t.iterdir())


def poke(path: Path, at: int, value: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(value)


def biggest_queue(root: Path) -> Path:
    return max(queues_of(root), key=lambda q: len(list(q.iterdir())))


def damage(kind: str, root: Path, log_end: int) -> None:
    q = biggest_queue(root)
    files = sorted(q.iterdir())
    first = files[0]
    if kind == "flip-phy":
        poke(first, 5 * UNIT + 1, b"\x5a")  # a high byte: the offset leaps ahead
    elif kind == "flip-size":
        poke(first, 5 * UNIT + 8, b"\x01")  # the size leaps by 16 MiB
    elif kind == "flip-tags":
        poke(first, 5 * UNIT + 12 + 7, b"\x33")
    elif kind == "truncated":
        with open(first, "r+b") as f:
            f.truncate(first.stat().st_size - 7)
    elif kind == "extended":
        with open(first, "ab") as f:
            f.write(bytes(UNIT))
    elif kind == "deleted-middle":
        files[len(files) // 2 if len(files) > 2 else 0].unlink()  # not the newest: a gap, or a missing first
    elif kind == "deleted-newest":
        files[-1].unlink()
    elif kind == "junk-file":
        (q / "notes.txt").write_text("x")
    elif kind == "dirty-tail":
        last = files[-1]
        u = np.frombuffer(last.read_bytes(), ">i8,>i4,>i8")
        end = int(np.flatnonzero(u["f1"] == 0)[0]) if (u["f1"] == 0).any() else None
        assert end is not None, "the newest file has room"
        poke(last, end * UNIT, np.array([(log_end + 100, 200, 7)], ">i8,>i4,>i8").tobytes())
    elif kind == "swapped-queues":
        a, b = queues_of(root)[:2]
        tmp = a.parent / "swap"
        a.rename(tmp)
        b.rename(a)
        tmp.rename(b)
    elif kind == "deleted-queue":
        shutil.rmtree(q)
    elif kind == "extra-queue":
        shutil.copytree(q, q.parent / "99")
    else:
        raise AssertionError(kind)


# What each damage must be reported as, with the CommitLog.
EXPECT = {"flip-phy": "wrong-field", "flip-size": "wrong-field", "flip-tags": "wrong-field", "truncated": "file-size",
          "extended": "file-size", "deleted-middle": "missing-file", "deleted-newest": "missing-file",
          "junk-file": "name", "dirty-tail": "dirty-tail", "swapped-queues": "wrong-field",
          "deleted-queue": "missing-queue", "extra-queue": "unexplained-queue"}
# What the files alone show (None: nothing they can show; the CommitLog is needed).
ALONE = {"flip-phy": "order", "flip-size": "order", "flip-tags": None, "truncated": "file-size",
         "extended": "file-size", "deleted-middle": None, "deleted-newest": None, "junk-file": "name",
         "dirty-tail": None, "swapped-queues": None, "deleted-queue": None, "extra-queue": None}


def log_end(case: Path) -> int:
    return int(json.loads((case / "expected" / "cq-manifest.json").read_text())["parse"]["stop"].split("abs ")[1]
               .split(")")[0])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_clean_reference_and_rebuilt_queues_verify_clean(case, tmp_path):
    assert verify_consumequeues(str(case / "expected" / "consumequeue")).clean
    assert verify_consumequeues(str(case / "expected" / "consumequeue"), case / "commitlog").clean
    size = json.loads((case / "expected" / "cq-manifest.json").read_text())["mappedFileSizeConsumeQueue"]
    build_index(case / "commitlog", tmp_path / "o", BuildConfig(timezone="UTC", targets=("consumequeue",),
                                                                 cq_file_size=size))
    assert verify_consumequeues(str(tmp_path / "o" / "consumequeue"), case / "commitlog").clean


@pytest.mark.parametrize("kind", sorted(EXPECT))
@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.name)
def test_every_damage_is_reported_with_the_commitlog(case, kind, tmp_path):
    root = tmp_path / "consumequeue"
    shutil.copytree(case / "expected" / "consumequeue", root)
    damage(kind, root, log_end(case))
    with_log = verify_consumequeues(str(root), case / "commitlog")
    assert not with_log.clean and EXPECT[kind] in with_log.counts, dict(with_log.counts)
    alone = verify_consumequeues(str(root))
    if ALONE[kind]:
        assert ALONE[kind] in alone.counts, dict(alone.counts)
    if kind == "deleted-middle" and len(list(biggest_queue(case / "expected" / "consumequeue").iterdir())) > 2:
        assert "missing-file" in alone.counts  # a gap in a queue's files shows without the log


def test_the_command_line_reports_and_exits_1(tmp_path, capsys):
    case = CASES[0]
    root = tmp_path / "consumequeue"
    shutil.copytree(case / "expected" / "consumequeue", root)
    assert main(["verify", "--consumequeue", str(root), "--commitlog", str(case / "commitlog")]) == 0
    assert "clean" in capsys.readouterr().out
    damage("flip-tags", root, log_end(case))
    assert main(["verify", "--consumequeue", str(root), "--commitlog", str(case / "commitlog"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"wrong-field": 1} and "tags_code" in report["problems"][0]["detail"]
    assert report["problems"][0]["offset"] == 5 * UNIT
    assert main(["verify", "--consumequeue", str(root), "--index", str(root)]) == 2


def test_a_custom_delay_table_needs_the_brokers_conf_to_verify_clean(capsys):
    case = Path(__file__).resolve().parents[1] / "reference" / "cq-spec" / "s02-delay-levels-custom-table"
    args = ["verify", "--consumequeue", str(case / "expected" / "consumequeue"), "--commitlog", str(case / "commitlog")]
    assert main(args + ["--broker-conf", str(case / "broker.conf"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["clean"]
    assert main(args + ["--json"]) == 1  # the default table gives the delayed messages other tagsCodes
    assert set(json.loads(capsys.readouterr().out)["counts"]) == {"wrong-field"}
