"""Time against the broker's own rebuild (issue 32): the fix users are given for damaged queues is to delete
``consumequeue/`` and restart the broker. On a store of a few GB written by a real broker, from one clean
stop, measure on two copies of it

  (a) ``rm -r consumequeue`` + broker start, until a consumer pulls the log's last message, against
  (b) ``rm -r consumequeue`` + ``rocketidx backfill --store`` + broker start, until the same;

each broken into its parts: the rm, the backfill, the broker's start to "boot success" (and listening),
and the time from there until the last message is pulled.

    cd tests && ../.venv/bin/python -m brokers.redispatch [--version 5.5.0] [--gb 2.1] [--work DIR] [--keep]
        [--json PATH] [--rounds N] [--no-tls] [--small-index] [--verify b|both|none] [--boot-timeout S]
        [--backfill-args ARGS]

The store: ``--gb`` GiB of ~16 KB bodies (keys ``b<i>``, tags) in batches of 64 over 4 topics x 8
queues (driver/Bulk.java), then one last message alone, so it is the log's last. The broker: the test
harness's conf with the broker's own sizes: 1 GiB CommitLog segments, 300000-entry queue files,
5000000 slots / 20000000 items per IndexFile (``--small-index``: 500000 / 2000000), ASYNC_FLUSH, 4 MiB
maxMessageSize. The clock of each run starts before the rm and stops when the waiting consumer
(Bulk ``waitlast``, started right after the rm/backfill so its JVM start overlaps the broker's) has the
message: the wall-clock moment it prints, after which it halts. Copies are made before the clocks, with
``cp --reflink=auto``; the source and the copies sit in the page cache alike (the machine's RAM holds
them), nothing is dropped. ``--rounds N`` times N pairs, each on fresh copies, in turns (a, b), (b, a)...,
and reports the medians.

The machine is shared: the load average (1 min) before and during each timed part, and the other brokers
running, are recorded with the figures.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from brokers import harness
from brokers.harness import Cluster, HarnessError, _signal_group, _spawn, default_broker_conf, free_listen_port

REPO = Path(__file__).resolve().parents[2]
BULK = harness.HERE / "driver" / "Bulk.java"
GIB = 1 << 30


# --- the client ------------------------------------------------------------------------------------------

def bulk_classes(version: str) -> Path:
    """Bulk.java, with the Workload.java it borrows from, compiled against ``version``'s client and tools jars
    (once per source change)."""
    digest = hashlib.sha1(BULK.read_bytes() + harness.DRIVER.read_bytes()).hexdigest()[:12]
    out = harness.CACHE / version / f"bulk-{digest}"
    if (out / "Bulk.class").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([harness.java_bin("javac"), "-nowarn", "-encoding", "UTF-8", "-cp",
                          str(harness.fetch(version) / "*"), "-d", str(out), str(BULK), str(harness.DRIVER)], capture_output=True, text=True)
    if run.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise HarnessError(f"javac Bulk.java against RocketMQ {version}:\n{run.stderr[-3000:]}")
    return out


def bulk_cmd(cluster: Cluster, *args: str, heap: str = "512m") -> list[str]:
    cp = f"{bulk_classes(cluster.version)}{os.pathsep}{cluster.lib / '*'}"
    conf = cluster.root / "home" / "conf" / "rmq.client.logback.xml"  # written by _props: logs/client.log
    return [harness.java_bin(), f"-Xmx{heap}", *cluster._props(), "-Drocketmq.client.logLevel=WARN",
            f"-Dlogback.configurationFile={conf}", f"-Drmq.logback.configurationFile={conf}",
            "-cp", cp, "Bulk", args[0], cluster.namesrv_addr, *args[1:]]


def last_json(path: Path) -> dict:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.startswith("{")]
    if not lines:
        raise HarnessError(f"no JSON line in {path}")
    return json.loads(lines[-1])


def rocketidx_bin() -> list[str]:
    cand = REPO / ".venv" / "bin" / "rocketidx"
    return [str(cand)] if cand.exists() else [sys.executable, "-m", "rocketidx"]


# --- the machine -----------------------------------------------------------------------------------------

def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class LoadSampler:
    """The 1-minute load average every few seconds while a timed part runs (its mean and max)."""

    def __init__(self, every: float = 5.0):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._every = every
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.samples.append(loadavg())

    def __enter__(self) -> "LoadSampler":
        self.before = loadavg()
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()

    def as_dict(self) -> dict:
        s = self.samples or [self.before]
        return {"before": self.before, "mean": round(sum(s) / len(s), 2), "max": max(s)}


def brokers_running() -> list[tuple[int, str]]:
    """(pid, -c conf) of every BrokerStartup on the machine."""
    run = subprocess.run(["pgrep", "-af", "BrokerStartup"], capture_output=True, text=True)
    out = []
    for line in run.stdout.splitlines():
        pid, _, cmd = line.partition(" ")
        if "org.apache.rocketmq.broker.BrokerStartup" not in cmd:
            continue
        words = cmd.split()
        conf = words[words.index("-c") + 1] if "-c" in words[:-1] else "?"
        out.append((int(pid), conf))
    return out


def du(path: Path) -> dict:
    """Apparent bytes and bytes on disk of a directory (IndexFiles and the next CommitLog segment are sparse)."""
    apparent = disk = 0
    for p in path.rglob("*"):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            apparent += st.st_size
            disk += st.st_blocks * 512
    return {"apparent": apparent, "disk": disk}


def tree_sizes(store: Path) -> dict:
    return {d.name: du(d) for d in sorted(store.iterdir()) if d.is_dir()}


def copy_store(src: Path, dst: Path) -> float:
    t0 = time.monotonic()
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", "--reflink=auto", "--sparse=always", str(src), str(dst)], check=True)
    return time.monotonic() - t0


# --- one timed restart -----------------------------------------------------------------------------------

def start_namesrv(cluster: Cluster) -> None:
    cluster.root.mkdir(parents=True, exist_ok=True)
    (cluster.root / "logs").mkdir(exist_ok=True)
    cluster._start_namesrv(120)
    cluster.port = free_listen_port()
    cluster.write_conf()


def timed_restart(cluster: Cluster, last: dict, *, backfill: bool, boot_timeout: float,
                  backfill_args: tuple[str, ...] = ()) -> dict:
    """From a stopped store with its consumequeue/: the clock, rm -r consumequeue, [backfill], the
    waiting consumer and the broker started, the clock stopped when the consumer exits with the message.
    The broker is stopped cleanly afterwards (its stop is not counted)."""
    store, conf = cluster.store, cluster.broker_conf
    row: dict = {"others_running": [c for _, c in brokers_running()]}
    wait_out = cluster.root / "logs" / "waitlast.out"
    with open(cluster.root / "logs" / "waitlast.err", "ab") as err_fh, LoadSampler() as load:
        row["load_before"] = load.before
        t0 = time.time()
        shutil.rmtree(store / "consumequeue")
        t_rm = time.time()
        if backfill:
            cmd = [*rocketidx_bin(), "backfill", "--store", str(store), "--broker-conf", str(conf),
                   "--broker-version", cluster.version, *backfill_args]
            row["backfill_cmd"] = " ".join(cmd)
            row["load_before_backfill"] = loadavg()
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
            (cluster.root / "logs" / "backfill.out").write_text(run.stdout + "\n--- stderr\n" + run.stderr)
            row["backfill_exit"] = run.returncode
            row["backfill_said"] = run.stdout.strip().splitlines()[-6:]
            if run.returncode != 0:
                raise HarnessError(f"backfill exited {run.returncode}: {run.stderr[-2000:]}")
        t_fill = time.time()
        row["load_before_broker"] = loadavg()
        with open(wait_out, "wb") as out_fh:
            waiter = _spawn(bulk_cmd(cluster, "waitlast", last["topic"], str(last["queueId"]),
                                     str(last["queueOffset"]), str(int(boot_timeout) + 600), heap="256m"),
                            cwd=cluster.root, env=cluster._env(), stdout=out_fh, stderr=err_fh)
            try:
                cluster.start_broker(timeout=boot_timeout)
                t_boot = time.time()
                row["load_at_boot"] = loadavg()
                rc = waiter.wait(boot_timeout + 600)
            finally:
                if waiter.poll() is None:
                    _signal_group(waiter, 9)
                    waiter.wait()
        t_exit = time.time()
    if rc != 0:
        raise HarnessError(f"waitlast exited {rc}; see {cluster.root / 'logs' / 'waitlast.err'}")
    got = last_json(wait_out)
    if got.get("keys") != "b-last":
        raise HarnessError(f"waitlast pulled {got}, not the last message")
    t_last = got["found_at_ms"] / 1000  # the moment the consumer had it (this machine's clock, as time.time)
    row.update({
        "total_s": round(t_last - t0, 2),
        "rm_s": round(t_rm - t0, 2),
        "backfill_s": round(t_fill - t_rm, 2),
        "start_to_boot_s": round(t_boot - t_fill, 2),
        "boot_to_last_s": round(t_last - t_boot, 2),
        "waitlast_exit_after_found_s": round(t_exit - t_last, 2),
        "waitlast": got,
        "load": load.as_dict(),
        "broker_log": broker_log_marks(cluster),
    })
    states = {d["to"]: d["ms_in_previous"] for d in row["broker_log"]["states"]}
    # the CommitLog's recovery, which in 5.x (8fc57f1 on) dispatches every record past the queues' end: (a)'s
    # whole rebuild; in (b) a scan of the last segments with nothing to dispatch
    row["recover_commitlog_s"] = (states["RECOVER_COMMITLOG_OK"] / 1000 if "RECOVER_COMMITLOG_OK" in states
                                  else None)
    row["stop_s"] = round(cluster.stop_broker(timeout=600), 1)
    return row


def broker_log_marks(cluster: Cluster) -> dict:
    """The broker store's state transitions (the time it spent in each state of its load and recovery, as it
    logs them), its recovery's end lines and its boot line, for the breakdown of start-to-boot."""
    log = cluster.root / "logs" / "broker.log"
    out: dict = {"states": [], "lines": []}
    if not log.exists():
        return out
    for line in log.read_text(errors="replace").splitlines():
        if "RocketmqStore - MessageStoreState transition from" in line:
            words = line.split("transition from ", 1)[1].split()
            ms = re.search(r"Time in previous state=(\d+)ms", line)
            out["states"].append({"at": line[:12], "from": words[0], "to": words[2].rstrip(";"),
                                  "ms_in_previous": int(ms.group(1)) if ms else None})
        elif ("RocketmqStore" in line and any(w in line for w in (
                "recover physics file end", "max phy offset", "recoverNormally", "recoverAbnormally",
                "last shutdown", "dispatch", "Timer recover ok", "truncate")) and "mkdir" not in line) \
                or ("RocketmqBroker" in line and "boot success" in line):
            out["lines"].append(line[:240])
    return out


def verify_store(cluster: Cluster) -> dict:
    cmd = [*rocketidx_bin(), "verify", "--store", str(cluster.store), "--broker-conf", str(cluster.broker_conf),
           "--broker-version", cluster.version]
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    (cluster.root / "logs" / "verify.out").write_text(run.stdout + "\n--- stderr\n" + run.stderr)
    return {"cmd": " ".join(cmd), "exit": run.returncode, "seconds": round(time.monotonic() - t0, 1),
            "said": (run.stdout.strip().splitlines() + run.stderr.strip().splitlines())[-8:]}


# --- the whole run ---------------------------------------------------------------------------------------

def broker_conf(small_index: bool) -> dict:
    return default_broker_conf(
        mappedFileSizeCommitLog=GIB,                 # the broker's default
        mappedFileSizeConsumeQueue=300000 * 20,      # the broker's default
        maxHashSlotNum=500000 if small_index else 5000000,
        maxIndexNum=2000000 if small_index else 20000000,
        flushDiskType="ASYNC_FLUSH",
        maxMessageSize=4 * 1024 * 1024,
    )


PARTS = ("total_s", "rm_s", "backfill_s", "start_to_boot_s", "boot_to_last_s", "recover_commitlog_s")


def same_queues(x: Path, y: Path) -> bool | str:
    """True when two stores' consumequeue/ trees hold the same files with the same bytes (RocksDB consume
    queues: the same entries, max keys and checkpoint), else the first difference."""
    if (x / "consumequeue" / "CURRENT").is_file():
        from rocketidx.consumequeue.rocksdb import read_table
        a, b = read_table(x / "consumequeue"), read_table(y / "consumequeue")
        if set(a.entries) != set(b.entries):
            return f"queues differ: {sorted(set(a.entries) ^ set(b.entries))[:5]}"
        for q, e in a.entries.items():
            if len(e) != len(b.entries[q]) or (e != b.entries[q]).any():
                return f"entries differ: {q}"
        return True if (a.max, a.checkpoint) == (b.max, b.checkpoint) else "max keys or checkpoint differ"
    fx = sorted(p.relative_to(x) for p in (x / "consumequeue").rglob("*") if p.is_file())
    fy = sorted(p.relative_to(y) for p in (y / "consumequeue").rglob("*") if p.is_file())
    if fx != fy:
        return f"files differ: {sorted(set(map(str, fx)) ^ set(map(str, fy)))[:5]}"
    for rel in fx:
        if (x / rel).read_bytes() != (y / rel).read_bytes():
            return f"bytes differ: {rel}"
    return True


def run(version: str, gb: float, work: Path, *, small_index: bool, verify: str, boot_timeout: float,
        rounds: int = 1, keep: bool = False, backfill_args: tuple[str, ...] = (), result: dict | None = None,
        settings: dict | None = None) -> dict:
    """The whole run; ``result`` (filled as it goes, so a failure keeps what was measured) is returned.
    ``settings``: broker.conf keys over the run's (``--set``, e.g. storeType=defaultRocksDB)."""
    conf = {**broker_conf(small_index), **(settings or {})}
    result = {} if result is None else result
    result.update({"version": version, "gb": gb, "jdk_java_options": os.environ.get("JDK_JAVA_OPTIONS"),
                   "work": str(work), "conf": {k: conf[k] for k in (
        "mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum", "flushDiskType",
        "maxMessageSize")}, "settings": settings or {}, "jvm": harness.JVM_FLAGS[:4], "cpus": os.cpu_count()})
    clusters: list[Cluster] = []
    try:
        # 1. the store
        source = Cluster(version, work / "source", conf=dict(conf))
        clusters.append(source)
        print(f"[{time.strftime('%H:%M:%S')}] source broker {version}, load {loadavg()}", flush=True)
        source.start(timeout=300)
        t0 = time.monotonic()
        send_out = source.root / "logs" / "bulk.out"
        with open(send_out, "wb") as out_fh, open(source.root / "logs" / "bulk.err", "ab") as err_fh:
            sender = _spawn(bulk_cmd(source, "send", f"127.0.0.1:{source.port}", str(int(gb * GIB)), "4", "8",
                                     "64", "16384", "4", heap="768m"),
                            cwd=source.root, env=source._env(), stdout=out_fh, stderr=err_fh)
            try:
                rc = sender.wait(7200)
            finally:
                if sender.poll() is None:
                    _signal_group(sender, 9)
                    sender.wait()
        if rc != 0:
            raise HarnessError(f"Bulk send exited {rc}; see {source.root / 'logs' / 'bulk.err'}")
        last = last_json(send_out)
        last["phy"] = int(last["offsetMsgId"][-16:], 16) if last.get("offsetMsgId") else None
        result["send"] = {**last, "seconds": round(time.monotonic() - t0, 1)}
        print(f"[{time.strftime('%H:%M:%S')}] sent {last['messages']} messages, {last['body_bytes'] / GIB:.2f} GiB "
              f"of bodies in {result['send']['seconds']} s; last: {last['topic']}/{last['queueId']}"
              f"@{last['queueOffset']} at CommitLog offset {last['phy']}", flush=True)
        result["source_stop_s"] = round(source.stop_broker(timeout=600), 1)
        source.stop()
        if (source.store / "abort").exists():
            raise HarnessError("the source broker's stop left abort: not a clean shutdown")
        result["store"] = {"total": du(source.store), "parts": tree_sizes(source.store),
                           "commitlog_files": sorted(f.name for f in (source.store / "commitlog").iterdir()),
                           "index_files": len(list((source.store / "index").iterdir()))}
        print(f"[{time.strftime('%H:%M:%S')}] store {result['store']['total']['disk'] / GIB:.2f} GiB on disk "
              f"({result['store']['total']['apparent'] / GIB:.2f} GiB apparent)", flush=True)

        # 2. per round, two fresh copies (made before any clock); (a) the broker alone, (b) backfill first,
        # in turns (a, b), (b, a), ... so a drift of the machine's load does not favour one side
        result["rounds"] = []
        for rnd in range(rounds):
            pair = {"a": Cluster(version, work / f"a{rnd}", conf=dict(conf)),
                    "b": Cluster(version, work / f"b{rnd}", conf=dict(conf))}
            clusters += pair.values()
            row: dict = {"order": "ab" if rnd % 2 == 0 else "ba",
                         "copy_s": [round(copy_store(source.store, c.store), 1) for c in pair.values()]}
            result["rounds"].append(row)
            for name in row["order"]:
                cluster, fill = pair[name], name == "b"
                start_namesrv(cluster)
                print(f"[{time.strftime('%H:%M:%S')}] round {rnd + 1} ({name}) "
                      f"{'rm + backfill + broker' if fill else 'rm + broker'}, load {loadavg()}, other brokers: "
                      f"{len(brokers_running())}", flush=True)
                got = timed_restart(cluster, last, backfill=fill, boot_timeout=boot_timeout,
                                    backfill_args=backfill_args)
                row[name] = got
                print(f"[{time.strftime('%H:%M:%S')}] round {rnd + 1} ({name}) total {got['total_s']} s = rm "
                      f"{got['rm_s']} + backfill {got['backfill_s']} + start-to-boot {got['start_to_boot_s']} + "
                      f"boot-to-last {got['boot_to_last_s']}; load {got['load']}", flush=True)
                cluster.stop()
                got["consumequeue_after"] = du(cluster.store / "consumequeue")
                if rnd == 0 and (verify == "both" or (verify == "b" and fill)):
                    print(f"[{time.strftime('%H:%M:%S')}] ({name}) rocketidx verify --store ...", flush=True)
                    got["verify"] = verify_store(cluster)
                    print(f"    exit {got['verify']['exit']} in {got['verify']['seconds']} s: "
                          f"{got['verify']['said'][-1:]}", flush=True)
            row["ratio_a_over_b"] = round(row["a"]["total_s"] / row["b"]["total_s"], 2)
            row["queues_identical"] = same_queues(pair["a"].store, pair["b"].store)
            print(f"    round {rnd + 1}: (a)/(b) = {row['ratio_a_over_b']}; the two stores' consumequeue/ after "
                  f"their broker ran: {'identical' if row['queues_identical'] is True else row['queues_identical']}",
                  flush=True)
            if rnd < rounds - 1 or not keep:
                for c in pair.values():
                    shutil.rmtree(c.store, ignore_errors=True)
        result["a"], result["b"] = result["rounds"][0]["a"], result["rounds"][0]["b"]
        result["median"] = {name: {part: statistics.median(r[name][part] for r in result["rounds"])
                                   for part in PARTS} for name in "ab"}
        result["ratio_a_over_b"] = round(result["median"]["a"]["total_s"] / result["median"]["b"]["total_s"], 2)
        return result
    finally:
        for c in clusters:
            c.stop()
        mine = [(pid, conf_path) for pid, conf_path in brokers_running() if conf_path.startswith(str(work))]
        for pid, _ in mine:  # none should be left: each was started under this run's work dir
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        result["left_brokers_killed"] = [p for p, _ in mine]


def _parts(x: dict) -> str:
    return (f"{x['total_s']:7.1f} s = rm {x['rm_s']:.2f} + backfill {x['backfill_s']:.1f} + start-to-boot "
            f"{x['start_to_boot_s']:.1f} (of which CommitLog recovery {x['recover_commitlog_s']:.1f}) + boot-to-last "
            f"{x['boot_to_last_s']:.2f}")


def report(r: dict) -> str:
    st = r["store"]
    lines = [
        f"RocketMQ {r['version']}, {r['cpus']} CPUs; store {st['total']['disk'] / GIB:.2f} GiB on disk "
        f"({st['total']['apparent'] / GIB:.2f} GiB apparent), CommitLog "
        f"{st['parts']['commitlog']['disk'] / GIB:.2f} GiB in {len(st['commitlog_files'])} files, "
        f"{r['send']['messages']} messages, last at CommitLog offset {r['send']['phy']}",
        f"conf: {r['conf']}",
        "(a) = rm -r consumequeue + broker start; (b) = rm -r consumequeue + rocketidx backfill + broker start; "
        "each until a consumer pulls the log's last message",
    ]
    for i, row in enumerate(r["rounds"]):
        for name in row["order"]:
            x = row[name]
            lines.append(f"round {i + 1} ({name}) {_parts(x)}   load before {x['load_before']}, "
                         f"mean {x['load']['mean']}, max {x['load']['max']}")
        lines.append(f"round {i + 1} ratio (a)/(b) {row['ratio_a_over_b']}; queues of (a) and (b) after: "
                     f"{'identical' if row['queues_identical'] is True else row['queues_identical']}")
    if len(r["rounds"]) > 1:
        for name in "ab":
            lines.append(f"median ({name}) {_parts(r['median'][name])}")
    lines.append(f"ratio (a)/(b){' of the medians' if len(r['rounds']) > 1 else ''}: {r['ratio_a_over_b']}")
    for name in ("a", "b"):
        states = r[name]["broker_log"]["states"]
        upto = [f"{d['to']} after {d['ms_in_previous']} ms" for d in states if d["ms_in_previous"]]
        upto = upto[:next((i + 1 for i, d in enumerate(upto) if d.startswith("RUNNING")), len(upto))]
        lines.append(f"round 1 ({name}) broker store states: " + ", ".join(upto))
    for name in ("a", "b"):
        if "verify" in r[name]:
            v = r[name]["verify"]
            lines.append(f"verify --store after ({name}), broker stopped: exit {v['exit']} in {v['seconds']} s: "
                         f"{v['said'][-1]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="brokers.redispatch", description=__doc__.split("\n\n")[0])
    pinned, ci = harness.versions()
    p.add_argument("--version", default=ci)
    p.add_argument("--gb", type=float, default=2.1, help="GiB of message bodies to send (default 2.1)")
    p.add_argument("--work", type=Path, help="work directory (default: a new one under $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--json", type=Path, help="write every figure here")
    p.add_argument("--small-index", action="store_true", help="500000 slots / 2000000 items per IndexFile")
    p.add_argument("--verify", choices=("b", "both", "none"), default="b",
                   help="rocketidx verify --store on the stopped store after (b) (default), both runs, or none")
    p.add_argument("--rounds", type=int, default=1,
                   help="timed pairs on fresh copies of the one store, in turns (a,b), (b,a), ...; medians reported")
    p.add_argument("--no-tls", action="store_true",
                   help="start namesrv and brokers with -Dtls.server.mode=disabled (through JDK_JAVA_OPTIONS): "
                        "no self-signed certificate made at each boot, whose RSA key generation takes 1 to 12 s "
                        "on this machine depending on its load")
    p.add_argument("--backfill-args", default="",
                   help="more arguments for (b)'s backfill, e.g. '--targets consumequeue' (default: none)")
    p.add_argument("--boot-timeout", type=float, default=3600, help="seconds a broker may take to boot")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker.conf setting over the run's (repeatable), e.g. storeType=defaultRocksDB: the "
                        "queues in a RocksDB database, which (a) deletes and the broker dispatches again")
    args = p.parse_args(argv)

    made = args.work is None
    work = Path(tempfile.mkdtemp(prefix="rocketidx-redispatch-")) if made else args.work.resolve()
    if not made:
        if work.exists() and any(work.iterdir()):
            p.error(f"{work} is not empty")
        work.mkdir(parents=True, exist_ok=True)
    print(f"work dir {work}", flush=True)
    if args.no_tls:  # the harness's JVM flags are fixed; the java launcher adds these to each JVM it starts
        extra = os.environ.get("JDK_JAVA_OPTIONS", "")
        os.environ["JDK_JAVA_OPTIONS"] = f"{extra} -Dtls.server.mode=disabled".strip()
    result: dict = {}
    try:
        run(args.version, args.gb, work, small_index=args.small_index, verify=args.verify,
            boot_timeout=args.boot_timeout, rounds=args.rounds, keep=args.keep,
            backfill_args=tuple(shlex.split(args.backfill_args)), result=result,
            settings=dict(kv.split("=", 1) for kv in args.set))
        print(report(result))
        return 0
    except HarnessError as e:
        result["error"] = str(e)
        print(f"failed: {e}", file=sys.stderr)
        return 1
    finally:
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
