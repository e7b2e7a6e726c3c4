"""Ctrl-C and SIGTERM during a Spark build (issue 20, reproducer 4): one line, exit status 130, the
previous output unchanged, and no JVM, Python worker or temporary directory left behind.

The signal is sent from outside while the job's tasks are running (their scratch directories exist
under the staged version); bench/campaigns/interrupts.py sends them at random moments."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rocketidx import cli

pytestmark = pytest.mark.spark

GEN = ["--messages", "60000", "--segment-bytes", "4m", "--body-bytes", "200", "--span", "2h"]
SIZES = ["--hash-slots", "1009", "--index-num", "20000", "--timezone", "UTC"]
BUILD = ["--master", "local[1]", "--split-bytes", "1m", *SIZES]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    s = tmp_path_factory.mktemp("intr-spark") / "store"
    assert cli.main(["gen", "--out", str(s), *GEN]) == 0
    return s


def marked(marker: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def running_tasks(out: Path) -> bool:
    return any((v / "_tasks").is_dir() and any((v / "_tasks").iterdir())
               for v in out.glob(".v-*") if not (out / "current").is_symlink() or v.name != os.readlink(out / "current"))


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_during_the_spark_job_ends_it_in_one_line(store, tmp_path, sig):
    out = tmp_path / "out"
    assert cli.main(["build", "--commitlog", str(store), "--out", str(out), "--in-process", *SIZES]) == 0
    before = os.readlink(out / "current")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    marker = uuid.uuid4().hex
    env = dict(os.environ, TMPDIR=str(scratch), SPARK_LOCAL_DIRS=str(scratch), RIDX_TEST_MARK=marker)
    p = subprocess.Popen([sys.executable, "-m", "rocketidx", "build", "--commitlog", str(store), "--out", str(out),
                          *BUILD, "--window", "30m", "--overwrite"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while not running_tasks(out) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.poll() is None, "the build ended before its tasks could be seen running"
    os.killpg(p.pid, getattr(signal, sig)) if sig == "SIGINT" else p.send_signal(getattr(signal, sig))
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr
    assert stderr.splitlines() == [f"rocketidx build: interrupted ({sig}); the previous output is unchanged"]
    assert os.readlink(out / "current") == before
    assert sorted(v.name for v in out.glob(".v-*")) == [before]
    deadline = time.monotonic() + 30
    while (marked(marker) or any(scratch.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marked(marker) == [], "a JVM or Python worker outlived the command"
    assert list(scratch.iterdir()) == [], "Spark's temporary directories were left behind"
