"""Broker stores made from the reference cases, and the crash scenarios issue 23 names, for the store tests
(tests/unit/verify/test_verify_store.py, and on Spark tests/spark/test_consumequeue_spark.py)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np


def store_of(case: Path, where: Path) -> tuple[Path, dict]:
    """A broker's store as the reference case has it: the CommitLog, RocketMQ's IndexFiles and queues."""
    shutil.copytree(case / "commitlog", where / "commitlog")
    shutil.copytree(case / "expected" / "index", where / "index")
    shutil.copytree(case / "expected" / "consumequeue", where / "consumequeue")
    c = json.loads((case / "case.json").read_text())
    return where, {"hash_slot_num": c["hashSlotNum"], "index_num": c["indexNum"]}


def queues(store: Path) -> list[Path]:
    return sorted(q for t in (store / "consumequeue").iterdir() for q in t.iterdir())


def biggest(store: Path) -> Path:
    return max(queues(store), key=lambda q: len(list(q.iterdir())))


def log_end(case: Path) -> int:
    return int(json.loads((case / "expected" / "cq-manifest.json").read_text())["parse"]["stop"].split("abs ")[1]
               .split(")")[0])


def scenario(name: str, store: Path, case: Path) -> None:
    q = biggest(store)
    files = sorted(q.iterdir())
    if name == "consumequeue-deleted":
        shutil.rmtree(store / "consumequeue")
    elif name == "queue-deleted":
        shutil.rmtree(q)
    elif name == "newest-files-deleted":
        for f in files[-2:]:
            f.unlink()
    elif name == "truncated-mid-entry":
        os.truncate(files[0], 7 * 20 + 9)
    elif name == "dirty-tail":
        u = np.frombuffer(files[-1].read_bytes(), ">i8,>i4,>i8")
        free = int(np.flatnonzero(u["f1"] == 0)[0])
        with open(files[-1], "r+b") as f:
            f.seek(free * 20)
            f.write(np.array([(log_end(case) + 50, 300, 0)], ">i8,>i4,>i8").tobytes())
    elif name == "crash-across-segments":  # #1434: the last two segments' entries never reached any queue
        cut = sorted(int(p.name) for p in (store / "commitlog").iterdir())[-2]
        for qd in queues(store):
            qfiles = sorted(qd.iterdir())
            for f in qfiles:
                u = np.frombuffer(f.read_bytes(), ">i8,>i4,>i8").copy()
                lost = (u["f0"] >= cut) & (u["f1"] > 0)
                if lost.any():
                    u[np.flatnonzero(lost)[0]:] = 0  # unflushed pages read back as zeros
                    if not u["f1"].any() and f != qfiles[0]:
                        f.unlink()  # a file created after the last flush is not there at all
                    else:
                        f.write_bytes(u.tobytes())
    elif name == "copied-from-another-broker":  # another broker's entries: the same names, other contents
        a, b = queues(store)[:2]
        for f in a.iterdir():
            if (b / f.name).exists():
                shutil.copyfile(b / f.name, f)
    else:
        raise AssertionError(name)


NAMED = {"consumequeue-deleted": "missing-queue", "queue-deleted": "missing-queue",
         "newest-files-deleted": "missing-file", "truncated-mid-entry": "file-size", "dirty-tail": "dirty-tail",
         "crash-across-segments": "missing-entry", "copied-from-another-broker": "wrong-field"}


# A clean restart dispatches every record past the queues' highest end again: with every queue gone, or every
# queue short of the same tail, it puts back all that is missing (real brokers do: #7355's fix, and make
# brokers' "consumequeue/ deleted" scenario), so verify --store counts those entries as restored, not problems.
RESTORED_BY_RESTART = {"consumequeue-deleted", "crash-across-segments"}


def told(report, name: str) -> bool:
    """Whether ``verify --store``'s report says what scenario ``name`` did: its named problem, or for those
    a restart restores, restored entries and none lost."""
    cq = report.areas["consumequeue"]
    if name in RESTORED_BY_RESTART:
        restored = report.state["restart_model"]["consumequeue"]
        return cq.clean and restored["restored_entries"] > 0 and restored["lost_entries"] == 0
    return NAMED[name] in cq.counts
