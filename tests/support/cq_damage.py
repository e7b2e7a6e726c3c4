"""The ConsumeQueue damage campaign shared by the verify tests (tests/unit/verify/test_verify_queues.py, and on Spark
tests/spark/test_consumequeue_spark.py): each kind of damage done to a copy of reference queue files, and what
verify must report it as, with the CommitLog and from the files alone."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

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
