"""One exit-code map for the command line and the spark-submit jobs (``rocketidx.cli.exit_code``): the same
outcome gives the same code from ``rocketidx build`` and from ``jobs/nightly_rebuild.py`` (issue 21):
0 done, 1 the input has problems (``--strict``), 2 could not run (any rocketidx error), 130 interrupted."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocketidx import cli

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
GEN = ["--messages", "3000", "--segment-bytes", "65536", "--body-bytes", "100", "--span", "2h"]
SIZES = ["--hash-slots", "101", "--index-num", "2000", "--timezone", "UTC", "--master", "local[1]"]

# Runs a command line after patching rocketidx.output.safety.check_range (the first thing a build does) to send
# SIGINT to this process: the interrupt lands at the same point in both entry points.
INTERRUPTING = textwrap.dedent("""
    import os, runpy, signal, sys
    import rocketidx.output.safety as safety
    original = safety.check_range
    def hooked(*a, **kw):
        os.kill(os.getpid(), signal.SIGINT)
        return original(*a, **kw)
    safety.check_range = hooked
    entry = sys.argv.pop(1)
    if entry == "cli":
        from rocketidx.__main__ import main
        sys.exit(main(sys.argv[1:]))
    sys.argv[0] = entry
    runpy.run_path(entry, run_name="__main__")
""")


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exits")
    good, damaged, junk = root / "good", root / "damaged", root / "junk"
    for s in (good, damaged):
        assert cli.main(["gen", "--out", str(s), *GEN]) == 0
    # A record's header zeroed in the second segment: reading stops there, before the newest segment.
    second = sorted((damaged / "commitlog").iterdir())[1]
    with open(second, "r+b") as f:
        f.seek(0)
        f.write(b"\x00" * 8)
    (junk / "commitlog").mkdir(parents=True)
    (junk / "commitlog" / "00000000000000000000").write_bytes(os.urandom(65536))  # not a log at all
    return {"good": good, "damaged": damaged, "junk": junk, "missing": root / "nothing-here"}


def both(store: Path, out: Path, *extra: str, interrupt: bool = False) -> tuple[tuple[int, str], tuple[int, str]]:
    """(exit code, stderr) of ``rocketidx build`` and of ``jobs/nightly_rebuild.py`` on the same input."""
    args = ["--commitlog", str(store), *SIZES, *extra]
    runs = []
    for entry, argv in (("cli", ["build", "--out", str(out / "cli"), *args]),
                        (str(ROOT / "jobs" / "nightly_rebuild.py"), ["--out", str(out / "job"), *args])):
        cmd = [sys.executable, "-c", INTERRUPTING, entry, *argv] if interrupt else \
            ([sys.executable, "-m", "rocketidx", *argv] if entry == "cli" else [sys.executable, entry, *argv])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        runs.append((r.returncode, r.stderr))
    return runs[0], runs[1]


def test_done_is_0_from_both(stores, tmp_path):
    (c, _), (j, err) = both(stores["good"], tmp_path)
    assert (c, j) == (0, 0), err


def test_a_strict_build_that_stopped_early_is_1_from_both(stores, tmp_path):
    (c, cerr), (j, jerr) = both(stores["damaged"], tmp_path, "--strict")
    assert (c, j) == (1, 1), (cerr, jerr)
    assert "reading stopped early" in cerr and "reading stopped early" in jerr


@pytest.mark.parametrize("case, says", [("junk", "CorruptRecordError"), ("missing", "StoreLayoutError")])
def test_could_not_run_is_2_from_both_with_the_same_line(stores, tmp_path, case, says):
    (c, cerr), (j, jerr) = both(stores[case], tmp_path)
    assert (c, j) == (2, 2), (cerr, jerr)
    assert cerr.splitlines()[-1].split(": ", 1)[1] == jerr.splitlines()[-1].split(": ", 1)[1]
    assert says in jerr


def test_an_interrupt_is_130_from_both(stores, tmp_path):
    (c, cerr), (j, jerr) = both(stores["good"], tmp_path, interrupt=True)
    assert (c, j) == (130, 130), (cerr, jerr)
    assert cerr.splitlines() == ["rocketidx build: interrupted (SIGINT); the previous output is unchanged"]
    assert jerr.splitlines() == ["nightly_rebuild: interrupted (SIGINT); the previous output is unchanged"]
