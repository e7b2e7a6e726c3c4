"""Remote stores: what a query, stats and verify of an ``s3://`` output cost, measured at the server.

Starts the test S3 server (moto, tests/support/s3server.py) in this process, copies a generated CommitLog to it,
builds its index in process at the broker's default sizes (5,000,000 slots, 20,000,000 items: 420 MB a
file, one file a day) into an ``s3://`` output, then runs each command as its own process and reports
the bytes the server sent (GET bodies) and the process's peak RSS:

* ``query`` of one key (targets: under 1 MB from the server);
* ``stats --in-process`` and ``verify --in-process --commitlog`` of the output (target: peak RSS under
  512 MB each).

Results go to stdout and ``bench-data/results-remote.json``.
Usage: ``python bench/speed/bench_remote.py [--messages N]``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench-data"
sys.path.insert(0, str(ROOT / "tests" / "support"))


# The command runs in a fresh interpreter that reports its own VmHWM (peak RSS) at exit: the rusage of a
# child counts the pages it shared with this process before exec, and this process holds the S3 server.
_WRAP = ("import atexit, sys\n"
         "def hwm():\n"
         "    kb = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
         "    print(f'VmHWM {kb}', file=sys.stderr)\n"
         "atexit.register(hwm)\n"
         "from rocketidx.cli import main\n"
         "sys.exit(main(sys.argv[1:]))\n")


def peak_rss_mb(args: list[str]) -> tuple[int, float, str, str]:
    """Run ``rocketidx ARGS`` in its own process: (exit code, its peak RSS in MB, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-c", _WRAP, *args], capture_output=True, text=True)
    lines = p.stderr.splitlines()
    hwm = next((int(line.split()[1]) for line in reversed(lines) if line.startswith("VmHWM ")), 0)
    err = "\n".join(line for line in lines if not line.startswith("VmHWM "))
    return p.returncode, hwm / 1024, p.stdout, err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    a = ap.parse_args(argv)
    from s3server import S3Server, configure_environment

    from rocketidx.sample.generate import GenConfig, generate_store
    server = S3Server(configure_environment())
    store = DATA / f"remote-store-{a.messages}"
    if not (store / "commitlog").is_dir():
        print(f"generating {a.messages:,} messages into {store} (once) ...", flush=True)
        generate_store(store, GenConfig(messages=a.messages, segment_bytes=64 << 20, span_ms=24 * 3_600_000,
                                        seed=11))
    bucket = server.new_bucket("bench")
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/index"
    t0 = time.monotonic()
    server.upload_dir(str(store / "commitlog"), commitlog)
    print(f"uploaded the CommitLog in {time.monotonic() - t0:.1f}s", flush=True)
    cli: list[str] = []
    results: dict = {"messages": a.messages}

    t0 = time.monotonic()
    code, rss, stdout, err = peak_rss_mb(cli + ["build", "--commitlog", commitlog, "--out", out, "--in-process",
                                                "--window", "24h", "--json"])
    if code != 0:
        print(err, file=sys.stderr)
        return 1
    summary = json.loads(stdout)
    results["build"] = {"wall_s": round(time.monotonic() - t0, 1), "peak_rss_mb": round(rss), "files": summary["files"]}
    print(f"build s3 -> s3 (in process, default sizes, 1-day windows): {results['build']}", flush=True)

    from rocketidx.output.remote import RemoteOutput
    manifest = RemoteOutput.from_uri(out).read_manifest()
    file_bytes = manifest["index_file_size"]
    key = _a_key(store)
    before = server.traffic.snapshot()
    code, rss, stdout, err = peak_rss_mb(cli + ["-v", "query", "--index", out, "--topic", key[0], "--key", key[1]])
    after = server.traffic.snapshot()
    results["query"] = {"exit": code, "server_bytes": after[0] - before[0], "server_gets": after[1] - before[1],
                        "file_bytes": file_bytes, "files": len(manifest["files"]), "peak_rss_mb": round(rss),
                        "offsets": json.loads(stdout)["offsets"] if code == 0 else None, "said": err.strip()}
    print(f"query one key: {results['query']['server_bytes']:,} bytes in {results['query']['server_gets']} GETs "
          f"from the server ({len(manifest['files'])} files of {file_bytes:,} bytes); {err.strip()}", flush=True)

    for name, cmd in (("stats", ["stats", "--index", out, "--in-process", "--json"]),
                      ("verify", ["verify", "--index", out, "--commitlog", commitlog, "--in-process", "--json"])):
        before = server.traffic.snapshot()
        t0 = time.monotonic()
        code, rss, stdout, err = peak_rss_mb(cli + cmd)
        after = server.traffic.snapshot()
        results[name] = {"exit": code, "wall_s": round(time.monotonic() - t0, 1), "peak_rss_mb": round(rss),
                         "server_bytes": after[0] - before[0], "server_gets": after[1] - before[1]}
        if name == "verify" and code in (0, 1):
            results[name]["clean"] = json.loads(stdout)["clean"]
        if code not in (0, 1):
            results[name]["stderr"] = err[-400:]
        print(f"{name}: {results[name]}", flush=True)
    DATA.mkdir(exist_ok=True)
    (DATA / "results-remote.json").write_text(json.dumps(results, indent=2) + "\n")
    server.stop()
    ok = (results["query"]["exit"] == 0 and results["query"]["server_bytes"] < 1 << 20
          and all(results[n]["exit"] == 0 and results[n]["peak_rss_mb"] < 512 for n in ("stats", "verify")))
    print("targets: query < 1 MB from the server, stats and verify < 512 MB peak RSS: " + ("met" if ok else "NOT met"))
    return 0 if ok else 1


def _a_key(store: Path) -> tuple[str, str]:
    """A topic and key of one message of the store (its first, through the CommitLog reader)."""
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.commitlog.readers import CommitLogReader
    for batch in CommitLogReader(list_segments(store / "commitlog")):
        row = batch.slice(0, 1).to_pylist()[0]
        return row["topic"], row["uniq_key"]
    raise SystemExit("the store has no messages")


if __name__ == "__main__":
    sys.exit(main())
