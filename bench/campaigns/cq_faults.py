"""``make faults``' ``queues`` part: damaged ConsumeQueues through ``verify --consumequeue``, with and without the log.

Bases: every reference case's queues (RocketMQ's own files, tests/reference/golden/*/expected/consumequeue)
and the queues rocketidx builds for a generated store of 40 queues in 1,280-byte files. Each case copies one
base and does one damage: a flipped byte in an entry's offset, size or tags field, a zeroed entry, a file
truncated or extended, the oldest, a middle or the newest file deleted, a junk file, a dirty tail (an entry
past the log's end after the last one), two queues swapped, a queue deleted, a queue that the log does not
explain. Then ``verify_consumequeues`` with the CommitLog (every damage must be reported: anything else is
a failure) and from the files alone (what it catches is counted per kind, not failed). Every base verifies
clean both ways first (a false report is a failure); an exception that is not rocketidx's own is a failure.
With a Spark session, every ``spark_every``-th case is checked on Spark too and must give the same report.
"""
from __future__ import annotations

import random
import shutil
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

from rocketidx.build.in_process import build_index
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.config import BuildConfig
from rocketidx.errors import RocketIdxError
from rocketidx.verify.queues import verify_consumequeues

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "reference" / "golden"
UNIT = 20
KINDS = ("flip-phy", "flip-size", "flip-tags", "zero-entry", "truncate", "extend", "delete-oldest", "delete-middle",
         "delete-newest", "junk-file", "dirty-tail", "swap-queues", "delete-queue", "extra-queue")


def queue_bases(work: Path) -> list[tuple[str, Path, Path]]:
    """(name, consumequeue directory, CommitLog directory) of every base."""
    out = [(c.name, c / "expected" / "consumequeue", c / "commitlog") for c in sorted(GOLDEN.iterdir())
           if (c / "expected" / "consumequeue").is_dir()]
    store = work / "gen-store"
    if not store.exists():
        generate_store(store, GenConfig(messages=4000, segment_bytes=256 * 1024, body_bytes=60, topics=5, queues=8,
                                        seed=11))
    build_index(store, work / "gen-out", BuildConfig(timezone="UTC", targets=("consumequeue",), cq_file_size=1280))
    out.append(("generated", work / "gen-out" / "consumequeue", store / "commitlog"))
    return out


def _queues(root: Path) -> list[Path]:
    return sorted(q for t in root.iterdir() if t.is_dir() for q in t.iterdir() if q.is_dir())


def _written(path: Path) -> np.ndarray:
    u = np.frombuffer(path.read_bytes(), ">i8,>i4,>i8")
    return np.flatnonzero((u["f1"] != 0) & (u["f1"] != 0x7FFFFFFF))


def damage(root: Path, kind: str, log_end: int, rng: random.Random) -> str | None:
    """Do ``kind`` to a copy of queues; what was done, or None when this base cannot take it (too few files)."""
    queues = _queues(root)
    q = rng.choice([q for q in queues if any(_written(f).size for f in q.iterdir())])
    files = sorted(q.iterdir())
    if kind in ("flip-phy", "flip-size", "flip-tags", "zero-entry"):
        f = rng.choice([f for f in files if _written(f).size])
        slot = int(rng.choice(list(_written(f))))
        at, width = {"flip-phy": (0, 8), "flip-size": (8, 4), "flip-tags": (12, 8), "zero-entry": (0, 20)}[kind]
        with open(f, "r+b") as fh:
            if kind == "zero-entry":
                fh.seek(slot * UNIT)
                fh.write(bytes(UNIT))
                return f"{f.relative_to(root)} slot {slot} zeroed"
            pos = slot * UNIT + at + rng.randrange(width)
            fh.seek(pos)
            b = fh.read(1)[0]
            fh.seek(pos)
            fh.write(bytes([b ^ (1 << rng.randrange(8))]))
        return f"{f.relative_to(root)} byte {pos} flipped"
    if kind == "truncate":
        f = rng.choice(files)
        keep = rng.randrange(f.stat().st_size)
        with open(f, "r+b") as fh:
            fh.truncate(keep)
        return f"{f.relative_to(root)} truncated to {keep}"
    if kind == "extend":
        f = rng.choice(files)
        with open(f, "ab") as fh:
            fh.write(rng.randbytes(rng.choice([1, 20, 1000])))
        return f"{f.relative_to(root)} extended"
    if kind.startswith("delete-") and kind != "delete-queue":
        if kind == "delete-middle" and len(files) < 3 or len(files) < 2 and kind == "delete-oldest":
            return None
        f = {"delete-oldest": files[0], "delete-newest": files[-1],
             "delete-middle": files[rng.randrange(1, len(files) - 1)] if len(files) > 2 else None}[kind]
        f.unlink()
        return f"{f.relative_to(root)} deleted"
    if kind == "junk-file":
        name = rng.choice(["notes.txt", "0000000000000000000x", "123"])
        (q / name).write_bytes(rng.randbytes(30))
        return f"{q.relative_to(root)}/{name} added"
    if kind == "dirty-tail":
        last = files[-1]
        u = np.frombuffer(last.read_bytes(), ">i8,>i4,>i8")
        free = np.flatnonzero(u["f1"] == 0)
        if not len(free) or (u["f1"][free[0]:] != 0).any():
            return None
        with open(last, "r+b") as fh:
            fh.seek(int(free[0]) * UNIT)
            fh.write(np.array([(log_end + rng.randrange(1, 10_000), rng.randrange(1, 500), 7)], ">i8,>i4,>i8").tobytes())
        return f"{last.relative_to(root)} slot {int(free[0])}: an entry past the log's end"
    if kind == "swap-queues":
        a, b = rng.sample(queues, 2) if len(queues) > 1 else (None, None)
        if a is None or sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir()) and all(
                (a / n).read_bytes() == (b / n).read_bytes() for n in (p.name for p in a.iterdir())):
            return None
        tmp = root / "swap-tmp"
        a.rename(tmp)
        b.rename(a)
        tmp.rename(b)
        return f"{a.relative_to(root)} <-> {b.relative_to(root)}"
    if kind == "delete-queue":
        shutil.rmtree(q)
        return f"{q.relative_to(root)} deleted"
    if kind == "extra-queue":
        shutil.copytree(q, q.parent / "99")
        return f"{q.relative_to(root)} copied to queue 99"
    raise AssertionError(kind)


def _log_end(commitlog: Path) -> int:
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    reader = CommitLogReader(list_segments(commitlog))
    for _ in reader.record_chunks():
        pass
    return reader.stop.phy_offset


def run_queues(cases: int, seed: int, work: Path, spark=None, spark_every: int = 25) -> tuple[Counter, list[dict]]:
    counts, failures = Counter(), []
    bases = queue_bases(work)
    ends = {name: _log_end(log) for name, _, log in bases}
    for name, cq, log in bases:  # zero false reports on clean queues, both ways
        for with_log in (True, False):
            report = verify_consumequeues(str(cq), log if with_log else None)
            counts[f"clean base, {'with the log' if with_log else 'files alone'}: "
                   f"{'clean' if report.clean else 'FALSE REPORT'}"] += 1
            if not report.clean:
                failures.append({"part": "queues", "case": name, "error": f"clean {name} reported {report.counts}"})
    for c in range(cases):
        rng = random.Random(seed * 104_729 + c)
        name, cq, log = rng.choice(bases)
        kind = KINDS[c % len(KINDS)]
        root = work / f"case{c}" / "consumequeue"
        shutil.copytree(cq, root)
        step = "damage"
        try:
            what = damage(root, kind, ends[name], rng)
            if what is None:
                counts[f"{kind}: base cannot take it (skipped)"] += 1
                continue
            step = "verify with the log"
            with_log = verify_consumequeues(str(root), log)
            counts[f"{kind}: with the log {'reported' if not with_log.clean else 'UNDETECTED'}"] += 1
            if with_log.clean:
                failures.append({"part": "queues", "case": c, "kind": kind, "damage": what,
                                 "error": f"undetected with the CommitLog: {what}"})
            step = "verify files alone"
            alone = verify_consumequeues(str(root))
            counts[f"{kind}: files alone {'caught' if not alone.clean else 'cannot see'}"] += 1
            if spark is not None and c % spark_every == 0:
                from rocketidx.spark.verify import verify_consumequeues_spark
                step = "verify on Spark"
                on_spark = verify_consumequeues_spark(str(root), log, spark=spark, split_bytes=rng.choice([4096, 65536]))
                same = on_spark.as_dict() == with_log.as_dict()
                counts[f"on Spark: {'same report' if same else 'DIFFERENT REPORT'}"] += 1
                if not same:
                    failures.append({"part": "queues", "case": c, "kind": kind, "damage": what,
                                     "error": "the Spark report differs from the in-process one"})
        except RocketIdxError as e:
            counts[f"{kind}: {step}: refused ({type(e).__name__})"] += 1
        except Exception:
            counts[f"FAILURE {step}"] += 1
            failures.append({"part": "queues", "case": c, "kind": kind, "step": step,
                             "error": traceback.format_exc(limit=8)})
        finally:
            shutil.rmtree(root.parent, ignore_errors=True)
    return counts, failures
