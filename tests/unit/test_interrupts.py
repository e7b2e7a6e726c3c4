"""Ctrl-C and SIGTERM end a command with one line and exit status 130 (issue 20, reproducer 4), in process.

The signal is sent by the command's own process at a chosen point (a hook patched in by a small driver
script), so each case lands where it means to: in the middle of reading, and inside the commit. The
Spark engine's cases are in tests/spark/test_interrupts_spark.py; bench/campaigns/interrupts.py sends them at
random moments from outside."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocketidx import cli

GEN = ["--messages", "4000", "--segment-bytes", "65536", "--body-bytes", "100", "--span", "2h"]
BUILD = ["--in-process", "--hash-slots", "101", "--index-num", "2000", "--timezone", "UTC", "--overwrite"]

# Runs the CLI as the console script does, after patching ``TARGET`` (module:function) so that its
# first call sends SIGNAL to this process (or, with GROUP, to its process group, as a terminal does).
DRIVER = textwrap.dedent("""
    import importlib, os, signal, sys
    target, sig, group = os.environ["TARGET"], getattr(signal, os.environ["SIGNAL"]), os.environ.get("GROUP")
    module, name = target.rsplit(":", 1)
    owner, _, attr = name.rpartition(".")
    obj = importlib.import_module(module)
    holder = getattr(obj, owner) if owner else obj
    original = getattr(holder, attr)
    def hooked(*a, **kw):
        os.killpg(0, sig) if group else os.kill(os.getpid(), sig)
        return original(*a, **kw)
    setattr(holder, attr, hooked)
    from rocketidx.__main__ import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    s = tmp_path_factory.mktemp("intr") / "store"
    assert cli.main(["gen", "--out", str(s), *GEN]) == 0
    return s


@pytest.fixture
def out(store, tmp_path) -> Path:
    o = tmp_path / "out"
    assert cli.main(["build", "--commitlog", str(store), "--out", str(o), *BUILD]) == 0
    return o


def interrupted_build(store, out, target: str, sig: str, group: bool = False, *extra):
    env = dict(os.environ, TARGET=target, SIGNAL=sig, **({"GROUP": "1"} if group else {}))
    return subprocess.run([sys.executable, "-c", DRIVER, "build", "--commitlog", str(store), "--out", str(out),
                           *BUILD, "--window", "30m", *extra], capture_output=True, text=True, env=env, timeout=120,
                          start_new_session=True)


def versions(out: Path) -> tuple[str, list[str]]:
    return os.readlink(out / "current"), sorted(p.name for p in out.iterdir() if p.name.startswith(".v-"))


@pytest.mark.parametrize("sig, group", [("SIGINT", True), ("SIGINT", False), ("SIGTERM", False)],
                         ids=["ctrl-c-to-the-group", "sigint", "sigterm"])
def test_an_interrupt_while_reading_ends_with_one_line_and_130(store, out, sig, group):
    before = versions(out)
    r = interrupted_build(store, out, "rocketidx.build.write:WindowSet.add", sig, group)
    assert r.returncode == 130, r.stderr
    assert r.stderr.splitlines() == [f"rocketidx build: interrupted ({sig}); the previous output is unchanged"]
    assert r.stdout == ""
    assert versions(out) == before  # the staged version is gone, the committed one untouched


def test_an_interrupt_during_the_commit_finishes_it_and_says_so(store, out):
    old, _ = versions(out)
    r = interrupted_build(store, out, "rocketidx.output.local:_commit", "SIGINT", True)
    assert r.returncode == 130, r.stderr
    assert r.stderr.splitlines() == ["rocketidx build: interrupted (SIGINT) during the commit, which was finished: "
                                     "the output holds the new build"]
    new, names = versions(out)
    assert new != old and names == [new]
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["window_ms"] == 1_800_000
    assert sorted(p.name for p in (out / "index").iterdir()) == sorted(f["name"] for f in manifest["files"])


def test_an_interrupt_before_the_first_commit_leaves_no_output(store, tmp_path):
    out = tmp_path / "fresh"
    r = interrupted_build(store, out, "rocketidx.build.write:WindowSet.add", "SIGTERM")
    assert r.returncode == 130 and len(r.stderr.splitlines()) == 1
    assert not out.exists()


def test_an_interrupt_of_a_range_build_leaves_the_previous_output(store, out):
    before = versions(out)
    r = interrupted_build(store, out, "rocketidx.build.direct_task:run_task", "SIGINT", True, "--from-time", "1700000000000")
    assert r.returncode == 130 and len(r.stderr.splitlines()) == 1, r.stderr
    assert versions(out) == before


def test_the_handler_is_in_place_before_the_heavy_imports():
    code = ("import signal, sys; import rocketidx.__main__ as m; m.interrupts.install(); "
            "print(signal.getsignal(signal.SIGTERM).__name__, sorted(x for x in ('numpy', 'pyarrow', 'pyspark') "
            "if x in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split(maxsplit=1) == ["_handle", "[]\n"]


def test_an_interrupt_is_the_process_own_exit_status_not_a_signal_death(store, out):
    """A parent's subprocess sees 130 (the process exited), not -2 (killed by the signal)."""
    r = interrupted_build(store, out, "rocketidx.build.write:WindowSet.add", "SIGINT")
    assert r.returncode == 130


def test_a_second_signal_during_the_cleanup_is_ignored():
    import rocketidx.interrupts as interrupts
    try:
        interrupts.install()
        with pytest.raises(interrupts.Interrupted):
            try:
                os.kill(os.getpid(), signal.SIGINT)
            finally:
                os.kill(os.getpid(), signal.SIGINT)  # the cleanup goes on
        err = RuntimeError("set off by the unwinding")
        assert interrupts.caught(err).signum == signal.SIGINT
    finally:
        interrupts.uninstall()
    assert interrupts.caught(err) is None and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_py4j_s_echo_of_an_interrupt_is_dropped_and_its_news_before_one_is_kept():
    """Py4J logs on its own loggers (py4j.clientserver: "Exception occurred while shutting down connection", with
    a traceback, when an interrupt cuts a call); once a signal came, none of that reaches stderr."""
    import logging
    import rocketidx.interrupts as interrupts
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    handler = Keep()
    root = logging.getLogger()
    root.addHandler(handler)

    def log_from_py4j(message: str) -> None:
        record = logging.getLogger("py4j.clientserver").makeRecord(
            "py4j.clientserver", logging.ERROR, os.path.join(os.sep, "site-packages", "py4j", "clientserver.py"),
            512, message, (), None)
        logging.getLogger("py4j.clientserver").handle(record)
    try:
        interrupts.install()
        log_from_py4j("before any signal")
        with pytest.raises(interrupts.Interrupted):
            os.kill(os.getpid(), signal.SIGINT)
        log_from_py4j("Exception occurred while shutting down connection")
        logging.getLogger("rocketidx.build").error("ours, after the signal")
    finally:
        interrupts.uninstall()
        root.removeHandler(handler)
    assert seen == ["before any signal", "ours, after the signal"]
