"""The fault campaign of issue 12, kept in the repository: ``make faults`` (a small sample runs in the unit
suite, tests/campaigns/test_faults_sample.py).

Nine parts, each printing counts per outcome and keeping a reproducer for every failure under
``bench-data/faults/repro/<part>-<n>/`` (the inputs, the command and the traceback):

* ``logs``: ``--logs`` mutated CommitLogs (default 50,000), each made from one of three small generated
  stores by one or two mutations: byte flips, truncations, TOTALSIZE overwrites, other header fields
  overwritten, zeroed and duplicated ranges, swapped and missing segments, wrong PHYSICALOFFSET fields,
  junk files. Each goes through ``build`` in process (random sizes and window); a built output through
  ``verify`` against the same log, which must be clean (a build/verify disagreement is a failure); every
  5th through ``query`` and ``stats``, every 10th through ``backfill`` into a broker store (then a bare
  ``verify`` of ``store/index``, clean again), every 25th through the CLI (exit code 0, 1 or 2, one
  line on stderr). Failures: an exception that is not one of the project's own types, a disagreement.
* ``index``: ``--index-cases`` damaged build outputs (byte flips in header, slots, items and the zero
  tail, truncated, extended, deleted and junk files, wrong ``--hash-slots``/``--index-num``) through
  verify (with the CommitLog), query and stats. Failures: an untyped exception. Reported, not failed:
  damage verify found nothing wrong with (``undetected``, with what was changed).
* ``kills``: ``--kills`` kill -9s each of an in-process build, a Spark build (the driver's process
  group) and a backfill, at a random moment, over a store of ``--kill-messages`` messages. After each:
  the previous output answers exactly as before (or the new one, complete), verifies clean, and a
  rerun is byte-identical to an uninterrupted run; for backfill, no file of the store lost (each in
  ``index/`` or the backup), the checkpoint the old or the finished one, and the rerun's ``index/``
  and checkpoint those of an uninterrupted backfill.
* ``race``: ``--queries`` query rounds racing ``--builds`` builds that alternate between two logs into
  one output; each round opens the index once and asks ``--keys`` keys: every round's answers must all be
  one build's (zero failures, zero mixed rounds).

* ``engines``: ``--engine-logs`` mutated logs (default 300; 40% of them with PHYSICALOFFSET fields made
  to lie, by the field or by issue 20's 14 bytes of garbage over it) plus issue 20's reproducer log,
  each through ``build --json`` in process and on Spark (one local session for all, random split sizes
  and writer partitions): exit code, entries, messages, stop, file bytes and rocketidx's warning lines
  must be the same. Counts the logs where a broker rule left entries out.

* ``queues``: ``--queue-cases`` damaged ConsumeQueues (default 2,000; bench/campaigns/cq_faults.py): flipped bytes in
  each field, zeroed entries, truncated, extended, deleted and junk files, dirty tails, swapped, deleted and
  unexplained queues, over the reference cases' queues and a generated store's, through ``verify
  --consumequeue`` with the CommitLog (every damage must be reported) and from the files alone (catches
  counted per kind); the clean bases must verify clean; every 25th case also on Spark, the same report.

* ``stores``: ``--store-cases`` damaged broker stores (default 20,000; bench/campaigns/store_faults.py), the
  ``queues`` kinds plus ``consumequeue/`` deleted, a crash across two segments and entries copied from another
  broker, through ``verify --store`` and ``backfill --targets index,consumequeue``: a refusal in one line
  that changes nothing, or a repair that changes something exactly when verify reported the queues and leaves
  them the clean base's byte for byte; then ``--repair-kills`` real repairs killed with -9 at random
  moments, each rerun ending where an uninterrupted repair does.

* ``executors``: ``--executor-kills`` nightly jobs (default 8; bench/campaigns/cluster_faults.py) on a Spark standalone
  cluster of two one-core workers, submitted with ``make dist``'s archive as docs/spark.md says, from ``s3://``
  into ``s3://`` (the S3 test server), each with one executor JVM killed with -9 at a random moment: every job
  must finish with its output byte-identical to an uninterrupted run's and nothing else under it.

* ``indexloss``: ``--index-loss-cases`` broker stores that lost IndexFiles (default 2,000;
  bench/campaigns/index_loss_faults.py): the newest k files deleted (k from 1 to all) or one from the middle, the
  queues intact, cut at a CommitLog offset or deleted, a checkpoint of random store times, with and without
  ``abort``. The campaign's own restart model (RocketMQ 5.x's recovery, written there) says which entries a
  restart would not restore; ``verify --store --json`` must report exactly those (and the restored count, the
  queues' end, the last file's endPhyOffset and the files a crash deletes); after ``backfill --store`` the
  model finds nothing lost, ``verify --store`` is clean and ``query`` answers every key as a full rebuild.

Results: stdout and ``bench-data/results-faults.json``. ``--only logs,index,kills,race,engines,queues,stores,executors,indexloss``;
``--workers``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench-data"
sys.path.insert(0, str(ROOT))

import rocketidx.layout as L  # noqa: E402
from rocketidx.backfill.index import interrupted, run_backfill  # noqa: E402
from rocketidx.build.in_process import build_index  # noqa: E402
from rocketidx.config import BuildConfig  # noqa: E402
from rocketidx.errors import RocketIdxError  # noqa: E402
from rocketidx.sample.generate import GenConfig, generate_store  # noqa: E402
from rocketidx.index.lookup import query_offsets  # noqa: E402
from rocketidx.query.lookup import open_index  # noqa: E402
from rocketidx.commitlog.segments import list_segments  # noqa: E402
from rocketidx.commitlog.readers import CommitLogReader  # noqa: E402
from rocketidx.stats.in_process import index_stats_local  # noqa: E402
from rocketidx.verify.core import BuildRead, open_for_verify, verify_index
from rocketidx.verify.report import VerifyReport  # noqa: E402

RIDX = [sys.executable, "-m", "rocketidx"]
T0 = 1_700_000_000_000


def scratch_root() -> Path:
    """Outputs are fsynced at every commit: on tmpfs that costs nothing, so the campaign measures the
    code rather than the disk."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="rocketidx-faults-", dir=shm if shm.is_dir() else None))


# --- base stores and mutations ----------------------------------------------------------------------

@dataclass
class Base:
    """A small generated store, read into memory: its segments, every record's start, some keys."""

    name: str
    segment_size: int
    segments: list[tuple[str, bytes]]
    records: list[tuple[int, int]]  # (segment number, offset in it)
    keys: list[tuple[str, str]]  # (topic, key) pairs that are indexed

    @classmethod
    def make(cls, where: Path, seed: int, **kw) -> Base:
        store = where / f"base{seed}"
        if not store.exists():
            generate_store(store, GenConfig(messages=120, segment_bytes=8192, body_bytes=40, span_ms=600_000,
                                            seed=seed, **kw))
        segs = list_segments(store / "commitlog")
        records, keys = [], []
        reader = CommitLogReader(segs)
        for b in reader:
            for phy, topic, uniq in zip(b.column("phy_offset").to_pylist(), b.column("topic").to_pylist(),
                                        b.column("uniq_key").to_pylist()):
                records.append((phy // segs[0].size, phy % segs[0].size))
                if uniq:
                    keys.append((topic, uniq))
        return cls(store.name, segs[0].size, [(s.name, Path(s.path).read_bytes()) for s in segs], records,
                   keys[::7][:12])


def bases(where: Path) -> list[Base]:
    where.mkdir(parents=True, exist_ok=True)
    return [Base.make(where, 1), Base.make(where, 2, clock_steps=2, clock_back_ms=120_000),
            Base.make(where, 3, keys_per_message=4, share_tx=0.3)]


class Log:
    """A mutable copy of a base's segments (name -> bytes) plus junk files in ``commitlog/``."""

    def __init__(self, base: Base):
        self.base = base
        self.segments = {n: bytearray(b) for n, b in base.segments}
        self.junk: dict[str, bytes] = {}

    def names(self) -> list[str]:
        return sorted(self.segments)

    def record(self, rng: random.Random) -> tuple[bytearray, int]:
        seg, off = rng.choice(self.base.records)
        name = self.base.segments[seg][0]
        if name not in self.segments:
            name = rng.choice(self.names())
        return self.segments[name], off

    def write(self, store: Path) -> None:
        d = store / "commitlog"
        d.mkdir(parents=True)
        for n, b in self.segments.items():
            (d / n).write_bytes(bytes(b))
        for n, b in self.junk.items():
            (d / n).write_bytes(b)


def _put(buf: bytearray, at: int, data: bytes) -> None:
    at = max(0, min(at, len(buf) - len(data)))
    buf[at:at + len(data)] = data


def m_flip(log: Log, rng: random.Random) -> str:
    name = rng.choice(log.names())
    buf = log.segments[name]
    done = []
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(buf))
        buf[at] ^= 1 << rng.randrange(8)
        done.append(at)
    return f"flip {name} @{done}"


def m_truncate(log: Log, rng: random.Random) -> str:
    name = rng.choice(log.names())
    keep = rng.randrange(len(log.segments[name]))
    del log.segments[name][keep:]
    return f"truncate {name} to {keep}"


def m_totalsize(log: Log, rng: random.Random) -> str:
    buf, off = log.record(rng)
    v = rng.choice([0, -1, 1, 4, 100, rng.randrange(1 << 31), -(1 << 31), len(buf) - off + rng.randint(-8, 8)])
    _put(buf, off, int(v).to_bytes(4, "big", signed=True))
    return f"TOTALSIZE @{off} = {v}"


HEADER_FIELDS = [(4, 4, "MAGICCODE"), (8, 4, "BODYCRC"), (12, 4, "QUEUEID"), (20, 8, "QUEUEOFFSET"),
                 (36, 4, "SYSFLAG"), (40, 8, "BORNTIMESTAMP"), (56, 8, "STORETIMESTAMP"), (84, 4, "BODYLENGTH"),
                 (88, 1, "body/TOPICLENGTH")]


def m_field(log: Log, rng: random.Random) -> str:
    buf, off = log.record(rng)
    at, width, what = rng.choice(HEADER_FIELDS)
    data = rng.randbytes(width) if rng.random() < 0.7 else bytes(width)
    _put(buf, off + at, data)
    return f"{what} @{off} = {data.hex()}"


def m_zero(log: Log, rng: random.Random) -> str:
    name = rng.choice(log.names())
    buf = log.segments[name]
    a = rng.randrange(len(buf))
    n = rng.choice([1, 4, 20, 200, 2000])
    buf[a:a + n] = bytes(len(buf[a:a + n]))
    return f"zero {name} [{a}, +{n})"


def m_duplicate(log: Log, rng: random.Random) -> str:
    src, dst = rng.choice(log.names()), rng.choice(log.names())
    a, b = log.segments[src], log.segments[dst]
    n = rng.choice([16, 200, 1000, 4000])
    s = rng.randrange(max(1, len(a) - n))
    d = rng.randrange(max(1, len(b) - n))
    chunk = bytes(a[s:s + n])
    b[d:d + len(chunk)] = chunk
    return f"copy {src}[{s}, +{n}) over {dst} @{d}"


def m_swap(log: Log, rng: random.Random) -> str:
    names = log.names()
    if len(names) < 2:
        return m_flip(log, rng)
    x, y = rng.sample(names, 2)
    log.segments[x], log.segments[y] = log.segments[y], log.segments[x]
    return f"swap {x} {y}"


def m_missing(log: Log, rng: random.Random) -> str:
    names = log.names()
    if len(names) < 2:
        return m_truncate(log, rng)
    gone = rng.choice(names)
    del log.segments[gone]
    return f"delete {gone}"


def m_phy(log: Log, rng: random.Random) -> str:
    done = []
    total = log.base.segment_size * len(log.base.segments)
    for _ in range(rng.randint(1, 3)):
        buf, off = log.record(rng)
        other = rng.choice(log.base.records)
        v = rng.choice([0, -7, 1 << 40, rng.randrange(total), other[0] * log.base.segment_size + other[1],
                        off + rng.choice([-1, 1, 8192])])
        _put(buf, off + 28, int(v).to_bytes(8, "big", signed=True))
        done.append((off, v))
    return f"PHYSICALOFFSET {done}"


def m_garbage(log: Log, rng: random.Random) -> str:
    """Issue 20's reproducer: 14 bytes of text written over a record's PHYSICALOFFSET field (and what is
    around it). Mostly the record stays valid (the CRC covers only the body) with a field that lies."""
    buf, off = log.record(rng)
    at = off + 28 + rng.choice([-5, -2, 0, 0, 0, 3, 6])
    _put(buf, at, b"GARBAGEGARBAGE")
    return f"GARBAGEGARBAGE @{off}+{at - off}"


def m_junk(log: Log, rng: random.Random) -> str:
    name = rng.choice([".DS_Store", "00000000000000000000.bak", "notes.txt", "9" * 20, "0" * 19 + "1",
                       f"{log.base.segment_size * 7:020d}"])
    log.junk[name] = rng.randbytes(rng.choice([0, 10, log.base.segment_size]))
    return f"junk file {name}"


MUTATIONS = {f.__name__[2:]: f for f in (m_flip, m_truncate, m_totalsize, m_field, m_zero, m_duplicate, m_swap,
                                          m_missing, m_phy, m_garbage, m_junk)}


# --- part 1: mutated logs ---------------------------------------------------------------------------

class Failure(Exception):
    pass


def _typed(fn, *a, **kw):
    """(result, None) or (None, error name) for the project's own errors; anything else propagates."""
    try:
        return fn(*a, **kw), None
    except RocketIdxError as e:
        return None, type(e).__name__


def _cli(args: list[str]) -> tuple[int, str, str]:
    from rocketidx.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def one_log(i: int, seed: int, base_list: list[Base], work: Path) -> tuple[list[str], dict | None]:
    """Run log ``i``: returns the outcomes it counted and, on a failure, its reproducer record."""
    rng = random.Random(seed * 1_000_003 + i)
    base = rng.choice(base_list)
    log = Log(base)
    kinds = [rng.choice(list(MUTATIONS)) for _ in range(1 if rng.random() < 0.7 else 2)]
    what = [MUTATIONS[k](log, rng) for k in kinds]
    hs, n = rng.choice([(31, 40), (101, 400), (7, 16)])
    window = rng.choice([0, 0, 60_000, 1000, 3_600_000])
    d = work / f"log{i}"
    shutil.rmtree(d, ignore_errors=True)
    store = d / "store"
    log.write(store)
    outcomes = [f"mutation: {k}" for k in kinds]
    step = "build"
    try:
        config = BuildConfig(hash_slot_num=hs, index_num=n, window_ms=window, timezone="UTC")
        built, err = _typed(build_index, store, d / "out", config)
        outcomes.append(f"build: {'built' if err is None else 'refused (' + err + ')'}")
        if err is None:
            step = "verify"
            pre = VerifyReport()
            files, m = open_for_verify(d / "out", None, None, pre)
            report = verify_index(files, store, window_ms=m.window_ms, window_ids=m.window_ids,
                                  rules=BuildRead.of(m))
            if pre.counts or not report.clean:
                p = (pre.problems + report.problems)[0]
                raise Failure(f"build/verify disagree: {dict(pre.counts + report.counts)}; first: {p}")
            outcomes.append("verify: clean")
            if i % 5 == 0:
                step = "query"
                idx, err = _typed(open_index, d / "out")
                for topic, key in base.keys[:4] if err is None else []:
                    query_offsets(idx, topic, key)
                outcomes.append(f"query: {'answered' if err is None else 'refused (' + err + ')'}")
                step = "stats"
                _, err = _typed(lambda: index_stats_local(d / "out", store).summary())
                outcomes.append(f"stats: {'ran' if err is None else 'refused (' + err + ')'}")
        if i % 10 == 0:
            step = "backfill"
            broker = d / "broker"
            shutil.copytree(store, broker)
            res, err = _typed(run_backfill, broker, hash_slot_num=hs, index_num=n, log=lambda *a: None)
            outcomes.append(f"backfill: {'ran' if err is None else 'refused (' + err + ')'}")
            if err is None and (broker / "index").is_dir() and any((broker / "index").iterdir()):
                step = "verify backfill"
                files, _ = open_for_verify(broker / "index", hs, n, VerifyReport())
                report = verify_index(files, broker / "commitlog")
                if not report.clean:
                    raise Failure(f"backfill/verify disagree: {dict(report.counts)}; first: {report.problems[0]}")
                outcomes.append("verify backfill: clean")
        if i % 25 == 0:
            step = "cli"
            sizes = ["--hash-slots", str(hs), "--index-num", str(n), "--timezone", "UTC", "--window", str(window)]
            code, _, err = _cli(["build", "--commitlog", str(store), "--out", str(d / "cli"), "--in-process"] + sizes)
            if code not in (0, 2) or "Traceback" in err or (code == 2 and len(err.strip().splitlines()) != 1):
                raise Failure(f"cli build exit {code}: {err[-500:]}")
            if code == 0:
                code, out, err = _cli(["verify", "--index", str(d / "cli"), "--commitlog", str(store)])
                if code != 0:
                    raise Failure(f"cli verify of the cli build exit {code}: {out[-800:]} {err[-300:]}")
            outcomes.append(f"cli: exit {code}")
    except Exception as e:  # a Failure, or an exception not of the project's own types
        kind = "disagreement" if isinstance(e, Failure) else f"untyped {type(e).__name__}"
        outcomes.append(f"FAILURE {step}: {kind}")
        return outcomes, {"part": "logs", "log": i, "seed": seed, "base": base.name, "mutations": what,
                          "hash_slots": hs, "index_num": n, "window_ms": window, "step": step,
                          "error": traceback.format_exc(limit=8), "dir": str(d)}
    shutil.rmtree(d, ignore_errors=True)
    return outcomes, None


def _logs_worker(job):
    lo, hi, seed, base_dir, work = job
    base_list = bases(Path(base_dir))
    counts, failures = Counter(), []
    w = Path(work)
    for i in range(lo, hi):
        outcomes, fail = one_log(i, seed, base_list, w)
        counts.update(outcomes)
        if fail:
            failures.append(_keep(fail))
    return hi - lo, counts, failures


def _keep(fail: dict) -> dict:
    repro = DATA / "faults" / "repro" / f"{fail['part']}-{fail.get('log', fail.get('case', 0))}"
    shutil.rmtree(repro, ignore_errors=True)
    repro.parent.mkdir(parents=True, exist_ok=True)
    if fail.get("dir") and Path(fail["dir"]).exists():
        shutil.copytree(fail["dir"], repro, symlinks=True)
        shutil.rmtree(fail["dir"], ignore_errors=True)
    repro.mkdir(parents=True, exist_ok=True)
    fail["reproducer"] = str(repro)
    (repro / "failure.json").write_text(json.dumps(fail, indent=2) + "\n")
    return fail


def run_logs(n: int, seed: int = 1, workers: int = 2, work: Path | None = None) -> tuple[Counter, list[dict]]:
    work = work or scratch_root()
    base_dir = work / "bases"
    bases(base_dir)  # made once, before the workers read them
    step = -(-n // max(1, workers * 8))
    jobs = [(a, min(n, a + step), seed, str(base_dir), str(work)) for a in range(0, n, step)]
    counts, failures = Counter(), []
    try:
        if workers <= 1:
            results = map(_logs_worker, jobs)
        else:
            import multiprocessing as mp
            pool = mp.get_context("fork").Pool(workers)
            results = pool.imap_unordered(_logs_worker, jobs)
        done = 0
        for m, c, f in results:
            counts.update(c)
            failures.extend(f)
            done += m
            if n >= 1000:
                print(f"  logs: {done:,}/{n:,}, failures {len(failures)}", file=sys.stderr, flush=True)
        if workers > 1:
            pool.close()
            pool.join()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return counts, failures


# --- part 2: damaged indexes ------------------------------------------------------------------------

def _damage(out: Path, rng: random.Random, hs: int, n: int) -> tuple[str, list[str]]:
    """Damage a build output (``out`` with index/ and _manifest.json, or a bare index copy); returns what
    was done and the extra arguments verify/query/stats get (wrong sizes)."""
    files = sorted(p for p in (out / "index").iterdir())
    f = rng.choice(files)
    size = f.stat().st_size
    kind = rng.choice(["header", "slots", "items", "tail", "truncate", "extend", "delete", "junk", "sizes"])
    items_at = L.items_offset(hs)
    if kind in ("header", "slots", "items", "tail"):
        count = int.from_bytes(f.read_bytes()[36:40], "big")
        lo, hi = {"header": (0, 40), "slots": (40, items_at), "items": (items_at + 20, items_at + 20 * count),
                  "tail": (items_at + 20 * count, size)}[kind]
        if hi <= lo:
            lo, hi = 0, 40
        at = rng.randrange(lo, hi)
        with open(f, "r+b") as fh:
            fh.seek(at)
            b = fh.read(1)[0]
            fh.seek(at)
            fh.write(bytes([b ^ (1 << rng.randrange(8))]))
        return f"{kind}: flipped a bit of {f.name} @{at}", []
    if kind == "truncate":
        keep = rng.randrange(size)
        os.truncate(f, keep)
        return f"truncate {f.name} to {keep}", []
    if kind == "extend":
        with open(f, "ab") as fh:
            fh.write(rng.randbytes(rng.choice([1, 20, 4096])))
        return f"extend {f.name}", []
    if kind == "delete":
        f.unlink()
        edge = " (oldest or newest)" if f in (files[0], files[-1]) else ""
        return f"delete {f.name}{edge}", []
    if kind == "junk":
        name = rng.choice(["junk", "20990101000000000", ".hidden"])
        (out / "index" / name).write_bytes(rng.randbytes(100))
        return f"junk file index/{name}", []
    wrong = rng.choice([["--hash-slots", str(hs + 1)], ["--index-num", str(n * 2)], ["--hash-slots", "5000000"],
                        ["--hash-slots", str(hs), "--index-num", str(n - 1)]])
    return f"wrong sizes {wrong}", wrong


def run_index(cases: int, seed: int = 1) -> tuple[Counter, list[dict]]:
    work = scratch_root()
    counts, failures = Counter(), []
    try:
        base = bases(work / "bases")[0]
        store = work / "bases" / base.name
        hs, n = 31, 40
        ref = work / "ref"
        build_index(store, ref, BuildConfig(hash_slot_num=hs, index_num=n, window_ms=60_000, timezone="UTC"))
        for c in range(cases):
            rng = random.Random(seed * 7919 + c)
            d = work / f"case{c}"
            out = d / "out"
            bare = rng.random() < 0.5
            if bare:  # a broker's store/index: no manifest
                shutil.copytree(ref / "current" / "index" if (ref / "current").exists() else ref / "index",
                                out / "index")
            else:
                shutil.copytree(ref, out, symlinks=True)
                out = out / "current" if (out / "current").exists() else out
            what, extra = _damage(out, rng, hs, n)
            if bare and not extra:  # a bare directory of non-full files does not tell its sizes: say them
                extra = ["--hash-slots", str(hs), "--index-num", str(n)]
            target = str(out / "index") if bare else str(d / "out")
            step = "verify"
            try:
                code, text, err = _cli(["verify", "--index", target, "--commitlog", str(store), "--in-process",
                                        "--json"] + extra)
                if "Traceback" in err or code not in (0, 1, 2):
                    raise Failure(f"verify exit {code}: {err[-400:]}")
                kind = what.split(":")[0].split(" ")[0]
                ignored = kind == "junk" and (not bare or "hidden" in what)
                # A bare directory (no manifest) whose oldest file is gone looks like the broker's retention,
                # and whose newest is gone like a log not indexed that far: nothing says a file is missing.
                cannot = kind == "delete" and bare and "oldest or newest" in what
                counts[f"verify {kind}: " + ("junk the index does not list, ignored" if code == 0 and ignored else
                                             "bare directory, edge file gone: undetectable" if code == 0 and cannot
                                             else {0: "UNDETECTED", 1: "found the damage (exit 1)",
                                                   2: "refused (exit 2, one line)"}[code])] += 1
                if code == 0 and not ignored and not cannot:
                    counts[f"undetected: {what} ({'bare directory' if bare else 'build output'})"] += 1
                step = "query"
                args = ["query", "--index", target] + extra
                for topic, key in base.keys[:3]:
                    code, _, err = _cli(args + ["--topic", topic, "--key", key])
                    if code not in (0, 2) or "Traceback" in err:
                        raise Failure(f"query exit {code}: {err[-400:]}")
                counts[f"query {kind}: exit {code}"] += 1
                step = "stats"
                code, _, err = _cli(["stats", "--index", target, "--in-process"] + extra)
                if code not in (0, 2) or "Traceback" in err:
                    raise Failure(f"stats exit {code}: {err[-400:]}")
                counts[f"stats {kind}: exit {code}"] += 1
            except Exception:
                counts[f"FAILURE {step}"] += 1
                failures.append(_keep({"part": "index", "case": c, "seed": seed, "damage": what, "step": step,
                                       "error": traceback.format_exc(limit=8), "dir": str(d)}))
                continue
            shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return counts, failures


# --- part 3: kill -9 --------------------------------------------------------------------------------

def _snapshot(out: Path) -> dict[str, bytes]:
    """Every IndexFile's bytes and the manifest of the output ``out`` points at (by name)."""
    cur = out / "current" if (out / "current").exists() else out
    snap = {p.name: p.read_bytes() for p in sorted((cur / "index").iterdir())}
    snap["_manifest.json"] = (cur / "_manifest.json").read_bytes()
    return snap


def _answers(out: Path, keys) -> list:
    idx = open_index(out)
    return [query_offsets(idx, t, k) for t, k in keys]


def _kill_group_after(cmd: list[str], delay: float, env=None) -> int:
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        p.wait(timeout=delay)
        return p.returncode  # finished before the kill
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return -9


def _timed(cmd: list[str], env=None) -> float:
    t = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.monotonic() - t


def run_kills(kills: int, messages: int, seed: int = 1, spark: bool = True) -> tuple[Counter, list[dict]]:
    rng = random.Random(seed)
    root = DATA / "faults" / "kills"
    store = root / "store"
    if not (store / "generator.json").exists() or json.loads((store / "generator.json").read_text()).get(
            "messages") != messages:
        shutil.rmtree(store, ignore_errors=True)
        generate_store(store, GenConfig(messages=messages, segment_bytes=16 * 1024**2, span_ms=4 * 3_600_000))
    keys = _some_keys(store)
    sizes = ["--hash-slots", "10007", "--index-num", "40000", "--timezone", "UTC"]
    counts, failures = Counter(), []
    plans = [("in-process build", ["--in-process"]), ("Spark build", ["--master", "local[2]"])] if spark else \
        [("in-process build", ["--in-process"])]
    for label, engine in plans:
        ref, out = root / "ref", root / "out"
        for p in (ref, out):
            shutil.rmtree(p, ignore_errors=True)
        # Each run replaces an output of another window on purpose: --overwrite.
        build = RIDX + ["build", "--commitlog", str(store), "--window", "1h", "--overwrite"] + sizes
        took = _timed(build + ["--out", str(ref)] + engine)
        want = _snapshot(ref)
        want_answers = _answers(ref, keys)
        previous = RIDX + ["build", "--commitlog", str(store), "--out", str(out), "--window", "0", "--in-process",
                           "--overwrite"] + sizes
        for k in range(kills):
            subprocess.run(previous, check=True, stdout=subprocess.DEVNULL)
            before = _answers(out, keys)
            delay = rng.uniform(0.05, took * 0.9)  # inside the run: every kill lands
            code = _kill_group_after(build + ["--out", str(out)] + engine, delay)
            step = "after the kill"
            try:
                now = _answers(out, keys)
                if now != before and now != want_answers:
                    raise Failure(f"answers after a kill at {delay:.2f}s are neither the previous nor the new ones")
                files, m = open_for_verify(out, None, None, VerifyReport())
                if not verify_index(files, store, window_ms=m.window_ms, window_ids=m.window_ids,
                                    rules=BuildRead.of(m)).clean:
                    raise Failure("the output after a kill does not verify clean")
                step = "rerun"
                subprocess.run(build + ["--out", str(out)] + engine, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                if _snapshot(out) != want:
                    raise Failure("the rerun after a kill is not byte-identical to an uninterrupted build")
                counts[f"{label}: killed at {'the end' if code != -9 else 'a random point'}, intact, rerun identical"] += 1
            except Exception:
                counts[f"FAILURE {label} {step}"] += 1
                failures.append(_keep({"part": "kills", "case": f"{label}-{k}", "delay": delay,
                                       "error": traceback.format_exc(limit=8)}))
    c, f = _backfill_kills(root, store, kills, rng)
    return counts + c, failures + f


def _some_keys(store: Path) -> list[tuple[str, str]]:
    segs = list_segments(store / "commitlog")[:1]
    b = next(iter(CommitLogReader(segs)))
    return [(t, k) for t, k in zip(b.column("topic").to_pylist()[::997], b.column("uniq_key").to_pylist()[::997]) if k][:10]


def _backfill_kills(root: Path, store: Path, kills: int, rng: random.Random) -> tuple[Counter, list[dict]]:
    """A broker store whose newest index files are gone (a crash); backfill killed at random, rerun."""
    counts, failures = Counter(), []
    broker, crashed = root / "broker", root / "broker-crashed"
    for p in (broker, crashed):
        shutil.rmtree(p, ignore_errors=True)
    (crashed / "commitlog").mkdir(parents=True)
    for s in (store / "commitlog").iterdir():
        os.link(s, crashed / "commitlog" / s.name)
    sizes = ["--hash-slots", "10007", "--index-num", "40000"]
    bf = RIDX + ["backfill", "--store", str(broker), "--in-process"] + sizes
    shutil.copytree(crashed, broker, copy_function=os.link)
    subprocess.run(bf, check=True, stdout=subprocess.DEVNULL)  # the whole index, as a broker would have it
    names = sorted(p.name for p in (broker / "index").iterdir())
    (crashed / "index").mkdir()
    for n in names[: len(names) // 2]:  # the crash: the newer half is gone
        shutil.copy2(broker / "index" / n, crashed / "index" / n)
    shutil.rmtree(broker)

    def fresh():
        shutil.rmtree(broker, ignore_errors=True)
        shutil.copytree(crashed, broker, copy_function=lambda s, d: os.link(s, d) if "commitlog" in s
                        else shutil.copy2(s, d))

    fresh()
    took = _timed(bf)
    want = {p.name: p.read_bytes() for p in (broker / "index").iterdir()}
    want_ckpt = (broker / "checkpoint").read_bytes()
    for k in range(kills):
        fresh()
        before = {p.name: p.read_bytes() for p in (broker / "index").iterdir()}
        delay = rng.uniform(0.05, took * 0.9)  # inside the run: every kill lands
        code = _kill_group_after(bf, delay)
        step = "after the kill"
        try:
            backups = sorted((broker / "index.backup").glob("*/index")) if (broker / "index.backup").exists() else []
            phase = ("the end" if code != -9 else "the install (rolled back by the rerun)" if interrupted(broker)
                     else "after the install" if backups else "before the install")
            for name, data in before.items():
                places = [broker / "index" / name] + [b / name for b in backups]
                if not any(p.exists() and p.read_bytes() == data for p in places):
                    raise Failure(f"{name} is neither in index/ nor in a backup after a kill at {delay:.2f}s")
            ckpt = (broker / "checkpoint").read_bytes() if (broker / "checkpoint").exists() else None
            if ckpt not in (None, want_ckpt):
                raise Failure("the checkpoint is neither the old one nor the finished backfill's")
            step = "rerun"
            subprocess.run(bf, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            got = {p.name: p.read_bytes() for p in (broker / "index").iterdir()}
            if got != want or (broker / "checkpoint").read_bytes() != want_ckpt:
                raise Failure(f"the rerun's index/ differs from an uninterrupted backfill's: "
                              f"{sorted(set(got) ^ set(want)) or [n for n in got if got[n] != want.get(n)]}")
            counts[f"backfill: killed {phase}, nothing lost, rerun identical"] += 1
        except Exception:
            counts[f"FAILURE backfill {step}"] += 1
            failures.append(_keep({"part": "kills", "case": f"backfill-{k}", "delay": delay,
                                   "error": traceback.format_exc(limit=8)}))
    return counts, failures


# --- part 4: queries racing builds ------------------------------------------------------------------

def run_race(queries: int, builds: int, nkeys: int = 8, seed: int = 1) -> tuple[Counter, list[dict]]:
    work = scratch_root()
    counts, failures = Counter(), []
    try:
        stores = []
        for s in (11, 12):  # two logs sharing their KEYS values (a small key space), at other offsets
            st = work / f"s{s}"
            generate_store(st, GenConfig(messages=20_000, segment_bytes=4 * 1024**2, span_ms=3_600_000, seed=s,
                                         distinct_keys=500))
            stores.append(st)
        sizes = ["--hash-slots", "1009", "--index-num", "8000", "--timezone", "UTC", "--in-process"]
        keys = [("Topic0", f"K{i}") for i in range(nkeys)]
        want = []
        for st in stores:
            build_index(st, work / f"ref-{st.name}", BuildConfig(hash_slot_num=1009, index_num=8000, timezone="UTC"))
            want.append(_answers(work / f"ref-{st.name}", keys))
        keys, want = _keys_that_differ(keys, want, stores, work)
        out = work / "out"
        build_index(stores[0], out, BuildConfig(hash_slot_num=1009, index_num=8000, timezone="UTC"))
        script = "; ".join([
            "import subprocess, sys",
            f"cmds = [{[*RIDX, 'build', '--commitlog', str(stores[0]), '--out', str(out), '--overwrite', *sizes]!r}, "
            f"{[*RIDX, 'build', '--commitlog', str(stores[1]), '--out', str(out), '--overwrite', *sizes]!r}]",
            f"[subprocess.run(cmds[(i + 1) % 2], check=True, stdout=subprocess.DEVNULL) for i in range({builds})]"])
        builder = subprocess.Popen([sys.executable, "-c", script])
        rounds = 0
        while builder.poll() is None or rounds < queries:
            try:
                got = _answers(out, keys)
                counts["round: " + ("first log's answers" if got == want[0] else "second log's answers"
                                    if got == want[1] else "MIXED")] += 1
                if got not in want:
                    failures.append({"part": "race", "round": rounds, "error": "mixed answers"})
            except Exception:
                counts["round: FAILED"] += 1
                failures.append({"part": "race", "round": rounds, "error": traceback.format_exc(limit=6)})
            rounds += 1
            if builder.poll() is not None and rounds >= queries:
                break
        builder.wait()
        counts[f"builds finished (exit {builder.returncode})"] += builds
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return counts, failures


def _keys_that_differ(keys, want, stores, work):
    """Keys whose answers differ between the two logs (so a mixed round is visible in every one)."""
    pairs = [(k, a, b) for k, a, b in zip(keys, want[0], want[1]) if a != b]
    if len(pairs) < 3:
        raise SystemExit("race: the two logs answer alike; choose other seeds")
    return [p[0] for p in pairs], [[p[1] for p in pairs], [p[2] for p in pairs]]


# --- part 5: the engines on damaged logs ------------------------------------------------------------

# What must be the same whatever the engine (issue 20): exit code, counts, stop, file bytes.
COMPARED = ("exit", "entries", "messages", "stop", "files", "warnings")
BROKER_RULES = ("garbage", "phy")  # the mutations that make PHYSICALOFFSET fields lie


def _engine_outcome(code: int, out: str, err: str, target: Path) -> dict:
    """One CLI build's outcome as compared between engines. ``warnings``: rocketidx's own stderr lines
    (the JVM's and the logging module's are not the command's answer)."""
    summary = None
    if code in (0, 1):
        lines = out.splitlines()
        if len(lines) != 1:
            raise Failure(f"exit {code} with {len(lines)} stdout lines; --json wants the summary only")
        summary = json.loads(lines[0])
    elif out.strip():
        raise Failure(f"exit {code} with stdout {out[:200]!r}")
    files = _digests(target) if summary is not None else None
    return {"exit": code, "entries": summary and summary["entries"], "messages": summary and summary["messages"],
            "stop": summary and (summary["stop"] or {}).get("phy_offset"), "files": files,
            "warnings": [ln for ln in err.splitlines() if ln.startswith("rocketidx build: warning")],
            "skipped": summary["below_end_phy_offset_skipped"] if summary else 0,
            "mismatch": bool(summary and summary["phy_mismatch"])}


def _digests(out: Path) -> dict[str, str]:
    """SHA-256 of every IndexFile and the manifest of the output ``out`` points at, read in pieces (a
    broker-sized file is 420 MB)."""
    import hashlib
    cur = out / "current" if (out / "current").exists() else out
    got = {}
    for p in sorted((cur / "index").iterdir()) + [cur / "_manifest.json"]:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        got[p.name] = h.hexdigest()
    return got


def engines_session():
    """One local Spark session for the whole part (the CLI's Spark builds join the active session)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from rocketidx.spark.session import get_session
    return get_session("local[2]", {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                    "spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "false",
                                    "spark.sql.session.timeZone": "UTC"})


# Small files (the broker's are 420 MB each, 25 of them here); no window fills one, so the counts are the
# issue's at any size.
REPRODUCER_SIZES = ["--hash-slots", "1009", "--index-num", "8000", "--timezone", "UTC"]


def reproducer_store(where: Path) -> Path:
    """Issue 20's reproducer 3: ``gen --messages 20000 --segment-bytes 4m``, then 14 bytes of garbage at
    byte 1,000,000 of the second segment (over a record's PHYSICALOFFSET field)."""
    store = where / "reproducer"
    if not store.exists():
        generate_store(store, GenConfig(messages=20_000, segment_bytes=4 * 1024**2))
        with open(store / "commitlog" / f"{4 * 1024**2:020d}", "r+b") as f:
            f.seek(1_000_000)
            f.write(b"GARBAGEGARBAGE")
    return store


def compare_engines(store: Path, d: Path, sizes: list[str], spark_args: list[str]) -> tuple[dict, dict]:
    """The in-process and the Spark CLI build of ``store`` (fresh outputs); raises Failure on a
    disagreement in any of :data:`COMPARED`."""
    common = ["build", "--commitlog", str(store), "--json"] + sizes
    a = _engine_outcome(*_cli(common + ["--out", str(d / "in-process"), "--in-process"]), d / "in-process")
    b = _engine_outcome(*_cli(common + ["--out", str(d / "spark"), "--master", "local[2]"] + spark_args), d / "spark")
    _same(a, b, COMPARED, "engines")
    return a, b


def _same(a: dict, b: dict, keys, what: str) -> None:
    differ = [k for k in keys if a[k] != b[k]]
    if differ:
        raise Failure(f"{what} disagree on " + ", ".join(f"{k}: {a[k]!r} != {b[k]!r}" for k in differ
                                                         if k != "files")
                      + (" (file bytes differ)" if "files" in differ else ""))


def compare_shuffle(store: Path, d: Path, a: dict, config: BuildConfig, split_bytes: int, partitions: int,
                    spark) -> None:
    """The Spark build's shuffle plan (which the CLI takes only where the direct plan cannot) against the
    in-process CLI build's outcome ``a``."""
    from rocketidx.spark.build import build_index_spark
    out = d / "shuffle"
    got, err = _typed(build_index_spark, store, out, config, spark=spark, split_bytes=split_bytes,
                      shuffle_partitions=partitions, shuffle=True)
    if err is not None:
        b = {"exit": 2}
    else:
        s = got[1]
        b = {"exit": a["exit"], "entries": s.entries, "messages": s.messages,
             "stop": (s.stop or {}).get("phy_offset"), "files": _digests(out)}
    _same(a, b, ("exit",) if a["exit"] == 2 else ("exit", "entries", "messages", "stop", "files"), "shuffle plan")


def run_engines(n: int, seed: int = 1, work: Path | None = None, spark=None, reproducer: bool = True,
                rule_share: float = 0.4, shuffle_every: int = 4) -> tuple[Counter, list[dict]]:
    """``n`` mutated logs (``rule_share`` of them with PHYSICALOFFSET fields made to lie) through the
    in-process and the Spark build (the CLI, ``--json``, one Spark session for all; half of them with
    ``--strict``), plus the reproducer's log: counts of outcomes and of logs where a broker rule left
    entries out. Every ``shuffle_every``-th log also through the Spark build's shuffle plan."""
    work = work or scratch_root()
    counts, failures = Counter(), []
    session = spark or engines_session()
    try:
        base_list = bases(work / "bases")
        jobs: list = [("reproducer", None)] if reproducer else []
        jobs += [(i, None) for i in range(n)]
        for i, _ in jobs:
            d = work / f"eng{i}"
            shutil.rmtree(d, ignore_errors=True)
            rng = random.Random(seed * 1_000_003 + (i if isinstance(i, int) else -1) + 500_000)
            what: list[str] = []
            if i == "reproducer":
                store = reproducer_store(work)
                sizes = REPRODUCER_SIZES
                spark_args: list[str] = []
            else:
                base = rng.choice(base_list)
                log = Log(base)
                if rng.random() < rule_share:
                    kinds = [rng.choice(BROKER_RULES)] + ([rng.choice(list(MUTATIONS))] if rng.random() < 0.2 else [])
                else:
                    kinds = [rng.choice(list(MUTATIONS)) for _ in range(1 if rng.random() < 0.7 else 2)]
                what = [MUTATIONS[k](log, rng) for k in kinds]
                store = d / "store"
                log.write(store)
                hs, num = rng.choice([(31, 40), (101, 400), (7, 16)])
                window = rng.choice([0, 0, 60_000, 1000, 3_600_000])
                split, parts = rng.choice([512, 2048, 8192, 1 << 20]), rng.choice([1, 2, 3])
                sizes = ["--hash-slots", str(hs), "--index-num", str(num), "--timezone", "UTC",
                         "--window", str(window)] + (["--strict"] if rng.random() < 0.5 else [])
                spark_args = ["--split-bytes", str(split), "--partitions", str(parts)]
            try:
                a, _ = compare_engines(store, d, sizes, spark_args)
                counts[f"agree: exit {a['exit']}"] += 1
                if i != "reproducer" and i % shuffle_every == 0:
                    config = BuildConfig(hash_slot_num=hs, index_num=num, window_ms=window, timezone="UTC")
                    compare_shuffle(store, d, a, config, split, parts, session)
                    counts["shuffle plan (library) agrees too"] += 1
                if a["skipped"]:
                    counts["agree, a broker rule left entries out (below endPhyOffset)"] += 1
                if a["mismatch"]:
                    counts["agree, PHYSICALOFFSET fields not their records' offsets"] += 1
                if a["skipped"] or a["mismatch"]:
                    counts["agree, broker rule logs (either)"] += 1
                if i == "reproducer":
                    counts[f"reproducer: exit {a['exit']}, {a['entries']:,} entries, {a['skipped']:,} skipped, "
                           f"engines agree"] += 1
            except Exception as e:
                kind = "disagreement" if isinstance(e, Failure) else f"untyped {type(e).__name__}"
                counts[f"FAILURE: {kind}"] += 1
                failures.append(_keep({"part": "engines", "log": i, "seed": seed, "mutations": what,
                                       "sizes": sizes, "spark": spark_args, "error": traceback.format_exc(limit=8),
                                       "dir": str(d)}))
                continue
            shutil.rmtree(d, ignore_errors=True)
            done = sum(v for k, v in counts.items() if k.startswith(("agree: exit", "FAILURE")))
            if done % 50 == 0:
                print(f"  engines: {done:,}/{len(jobs):,}, failures {len(failures)}", file=sys.stderr, flush=True)
    finally:
        if spark is None:
            session.stop()
        shutil.rmtree(work, ignore_errors=True)
    return counts, failures


# --- part 6: damaged ConsumeQueues ----------------------------------------------------------------------

def run_queue_part(cases: int, seed: int = 1, spark: bool = True) -> tuple[Counter, list[dict]]:
    from cq_faults import run_queues
    work = scratch_root()
    session = None
    try:
        if spark:
            from rocketidx.spark.session import get_session
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            session = get_session(master="local[2]")
        counts, failures = run_queues(cases, seed, work, spark=session)
        return counts, [_keep(dict(f, part="queues")) for f in failures]
    finally:
        if session is not None:
            session.stop()
        shutil.rmtree(work, ignore_errors=True)


# --- part 7: damaged broker stores, and repairs killed -----------------------------------------------

def run_store_part(cases: int, kills: int, messages: int, seed: int = 1, workers: int = 2) -> tuple[Counter, list[dict]]:
    from store_faults import run_repair_kills, run_stores
    work = scratch_root()
    try:
        counts, failures = run_stores(cases, seed, work, workers)
        kc, kf = run_repair_kills(kills, messages, seed, work, RIDX, _kill_group_after)
        counts.update(kc)
        return counts, [_keep(dict(f, part="stores")) for f in failures + kf]
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- part 9: stores that lost IndexFiles, against the campaign's restart model -----------------------

def run_index_loss_part(cases: int, seed: int = 1, workers: int = 2) -> tuple[Counter, list[dict]]:
    from index_loss_faults import run_index_loss
    work = scratch_root()
    try:
        counts, failures = run_index_loss(cases, seed, work, workers)
        return counts, [_keep(f) for f in failures]
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- main -------------------------------------------------------------------------------------------

def run_executor_part(kills: int, messages: int, seed: int = 1) -> tuple[Counter, list[dict]]:
    from cluster_faults import run_executor_kills
    work = scratch_root()
    try:
        counts, failures = run_executor_kills(kills, messages, seed, work)
        return counts, [_keep(f) for f in failures]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _print(part: str, counts: Counter, failures: list[dict], seconds: float) -> None:
    print(f"\n== {part} ({seconds:.0f} s): {len(failures)} failure(s)")
    for k, v in sorted(counts.items()):
        print(f"  {v:>8,}  {k}")
    for f in failures[:10]:
        print(f"  reproducer: {f.get('reproducer', '-')}: {f['error'].strip().splitlines()[-1][:200]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="logs,index,kills,race,engines,queues,stores,executors,indexloss")
    ap.add_argument("--queue-cases", type=int, default=2_000, help="queues: damaged ConsumeQueues through verify")
    ap.add_argument("--store-cases", type=int, default=20_000,
                    help="stores: damaged broker stores through verify --store and backfill")
    ap.add_argument("--repair-kills", type=int, default=20, help="stores: backfill --targets index,consumequeue killed")
    ap.add_argument("--executor-kills", type=int, default=8,
                    help="executors: nightly jobs on a standalone cluster, each losing an executor to kill -9")
    ap.add_argument("--index-loss-cases", type=int, default=2_000,
                    help="indexloss: stores that lost IndexFiles through verify --store and backfill")
    ap.add_argument("--logs", type=int, default=50_000)
    ap.add_argument("--index-cases", type=int, default=1_000)
    ap.add_argument("--kills", type=int, default=10, help="per kind: in-process build, Spark build, backfill")
    ap.add_argument("--kill-messages", type=int, default=300_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--builds", type=int, default=20)
    ap.add_argument("--engine-logs", type=int, default=300,
                    help="engines: mutated logs through both engines (plus the reproducer's)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-spark", action="store_true")
    a = ap.parse_args(argv)
    results, total_failures = {}, 0
    shutil.rmtree(DATA / "faults" / "repro", ignore_errors=True)  # the reproducers are this run's
    for part in a.only.split(","):
        t = time.monotonic()
        if part == "logs":
            counts, failures = run_logs(a.logs, a.seed, a.workers)
        elif part == "index":
            counts, failures = run_index(a.index_cases, a.seed)
        elif part == "kills":
            counts, failures = run_kills(a.kills, a.kill_messages, a.seed, spark=not a.no_spark)
        elif part == "race":
            counts, failures = run_race(a.queries, a.builds, seed=a.seed)
        elif part == "engines":
            counts, failures = run_engines(a.engine_logs, a.seed)
        elif part == "queues":
            counts, failures = run_queue_part(a.queue_cases, a.seed, spark=not a.no_spark)
        elif part == "stores":
            counts, failures = run_store_part(a.store_cases, a.repair_kills, a.kill_messages, a.seed, a.workers)
        elif part == "executors":
            counts, failures = run_executor_part(a.executor_kills, a.kill_messages, a.seed)
        elif part == "indexloss":
            counts, failures = run_index_loss_part(a.index_loss_cases, a.seed, a.workers)
        else:
            raise SystemExit(f"unknown part {part}")
        seconds = time.monotonic() - t
        _print(part, counts, failures, seconds)
        results[part] = {"seconds": round(seconds, 1), "counts": dict(counts), "failures": failures}
        total_failures += len(failures)
    DATA.mkdir(exist_ok=True)
    (DATA / "results-faults.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{total_failures} failure(s); results in {DATA / 'results-faults.json'}")
    return 1 if total_failures else 0


if __name__ == "__main__":
    sys.exit(main())
