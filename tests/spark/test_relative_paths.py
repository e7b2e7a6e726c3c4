"""Every writing command from any working directory (issue 31, items 2 and 3; must-show 4): ``build`` with both
targets, ``jobs/nightly_rebuild.py``, ``backfill --store`` (and ``jobs/backfill.py``) and ``verify --store`` (which
rebuilds into scratch), each typed with relative paths from three directories (the data's parent, the data
directory itself with ``./``, and an unrelated one with ``../..``), in process and on ``local[2]``: the same exit
code, the same files byte for byte, and the same ``--json`` naming the paths resolved.

The commands run in this process, after a ``chdir``, on the shared ``local[2]`` session: its Python workers
run in the JVM's working directory, not the one a command was typed in, which is what a relative path sent
to a task gets wrong. Spark runs first: on 5d56397 its queue builds stopped at once on a relative staging
directory (item 2), and the in-process runs after it on a manifest naming the log as typed (item 3)."""
from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import re
import shutil
from pathlib import Path
from typing import Callable

import pytest

from brokerstore import broker_store, crash

from rocketidx import cli

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SIZES = ["--hash-slots", "101", "--index-num", "5000", "--timezone", "UTC"]
IN_PROCESS, LOCAL2 = ["--in-process"], ["--master", "local[2]"]
VOLATILE = re.compile(r"(_s|_mb)$")  # timings and memory: the only keys two equal runs may disagree on
BACKUP_TIME = re.compile(r"\d{8}T[\d.]+Z(-\d+)?")  # a backup directory's name is the time it was made


def _job(name: str):
    spec = importlib.util.spec_from_file_location(f"job_{name}", ROOT / "jobs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


RUN: dict[str, Callable[[list[str]], int]] = {"rocketidx": cli.main, "nightly_rebuild": _job("nightly_rebuild"),
                                              "backfill": _job("backfill")}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """``base/data/gen-store`` (a generated log of 4 segments), ``base/data/crashed-store`` (a crashed broker's store
    whose newest IndexFiles are gone and which has no queues: backfill writes both), ``base/elsewhere/deeper``."""
    base = tmp_path_factory.mktemp("relative")
    data = base / "data"
    assert cli.main(["gen", "--out", str(data / "gen-store"), "--messages", "6000", "--segment-bytes", "1m",
                     "--body-bytes", "300", "--span", "2h"]) == 0
    store, files = broker_store(base / "made", 6000)
    crash(store, files, keep=2, deleted=1)
    shutil.move(str(store), str(data / "crashed-store"))
    (base / "elsewhere" / "deeper").mkdir(parents=True)
    return base


def typed_from(base: Path) -> list[tuple[Path, Callable[[Path], str]]]:
    """(working directory, how a path under ``base/data`` is typed there), for the three directories."""
    data = base / "data"
    return [(base, lambda p: str(p.relative_to(base))),
            (data, lambda p: f"./{p.relative_to(data)}"),
            (base / "elsewhere" / "deeper", lambda p: f"../../{p.relative_to(base)}")]


def stable(report: dict) -> dict:
    """A ``--json`` report without what differs between two equal runs: timings, memory, a backup's time."""
    if isinstance(report, dict):
        return {k: stable(v) for k, v in report.items() if not VOLATILE.search(k)}
    if isinstance(report, list):
        return [stable(v) for v in report]
    return BACKUP_TIME.sub("<time>", report) if isinstance(report, str) else report


def files_of(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under ``root`` (a committed output through its ``current`` links) with a hash of its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not rel.parts[0].startswith((".v-", ".lock", *skip)):
            out[str(rel)] = hashlib.sha1(p.read_bytes()).hexdigest()
    for link in ("index", "consumequeue"):  # the committed version's, through the symlinks rglob does not follow
        if (root / link).is_symlink():
            out.update({f"{link}/{k}": v for k, v in files_of((root / link).resolve()).items()})
    return out


def run_everywhere(base: Path, monkeypatch, capsys, prog: str, argv: Callable[[Callable[[Path], str]], list[str]],
                   before: Callable[[], None] = lambda: None, after: Callable[[], dict] = lambda: {},
                   where: slice = slice(None)) -> list[tuple]:
    """``prog argv`` from each working directory (``where``: some of them; ``argv`` types its paths with the
    function it is given): ``before`` each run, then (exit code, the stable ``--json``, ``after()``) of each."""
    results = []
    for cwd, typed in typed_from(base)[where]:
        before()
        monkeypatch.chdir(cwd)
        code = RUN[prog](argv(typed))
        captured = capsys.readouterr()
        assert code in (0, 1), f"{prog} from {cwd}: exit {code}: {captured.err}"
        results.append((code, stable(json.loads(captured.out)), after()))
    monkeypatch.chdir(ROOT)
    return results


def without_time_index(files: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in files.items() if not k.startswith("_timeindex/")}


def assert_named_resolved(report, path: Path) -> None:
    """``path`` is named in ``report`` (a ``--json`` report, a manifest), and always as its absolute path."""
    text = json.dumps(report)
    assert text.count(path.name) == text.count(str(path)) > 0, f"{path} named otherwise in {text[:2000]}"


def assert_all_equal(results: list, what: str) -> None:
    first = json.dumps(results[0], indent=1, sort_keys=True).splitlines()
    for i, r in enumerate(results[1:], 1):
        diff = difflib.unified_diff(first, json.dumps(r, indent=1, sort_keys=True).splitlines(), lineterm="", n=1)
        assert r == results[0], f"{what}: the run from directory {i} differs from the first:\n" + "\n".join(diff)


@pytest.mark.parametrize("targets", ["index,consumequeue", "consumequeue"])
def test_build_gives_the_same_output_from_any_directory_on_both_engines(spark, base, monkeypatch, capsys, targets):
    data, out = base / "data", base / "data" / f"out-{targets.replace(',', '-')}"
    runs = {}
    for name, engine in (("local[2]", LOCAL2), ("in-process", IN_PROCESS)):
        # Every run replaces the one before into the same --out, from another directory, with no --overwrite
        # (--full: each reads the whole log, as the first did; without it a run brings the output up to date).
        runs[name] = run_everywhere(base, monkeypatch, capsys, "rocketidx", lambda t: [
            "build", "--commitlog", t(data / "gen-store"), "--out", t(out), "--targets", targets, *SIZES, "--json",
            "--full", *engine], after=lambda: files_of(out))
        assert_all_equal(runs[name], f"build --targets {targets} {name}")
    # Without --full, a run from another directory knows the output's log as its own: nothing changed, nothing
    # written.
    again = run_everywhere(base, monkeypatch, capsys, "rocketidx", lambda t: [
        "build", "--commitlog", t(data / "gen-store"), "--out", t(out), "--targets", targets, *SIZES, "--json",
        *IN_PROCESS], after=lambda: files_of(out), where=slice(2, 3))
    assert again[0][1]["incremental"]["why"] == "nothing changed", again[0][1]["incremental"]
    assert again[0][2] == runs["in-process"][0][2]
    # And the engines wrote the same bytes (but for the time index, which a Spark build of the queues alone
    # does not keep: its direct tasks, which collect it, run for the index).
    assert without_time_index(runs["in-process"][0][2]) == without_time_index(runs["local[2]"][0][2])
    assert_named_resolved(json.loads((out / "_manifest.json").read_text()), data / "gen-store")


def test_the_nightly_job_gives_the_same_output_from_any_directory_on_both_engines(spark, base, monkeypatch, capsys):
    data, out = base / "data", base / "data" / "out-nightly"
    runs = {}
    for name, engine in (("local[2]", LOCAL2), ("in-process (by size)", [])):
        runs[name] = run_everywhere(base, monkeypatch, capsys, "nightly_rebuild", lambda t: [
            "--commitlog", t(data / "gen-store"), "--out", t(out), "--targets", "index,consumequeue", *SIZES,
            "--json", "--full", *engine], after=lambda: files_of(out))
        assert_all_equal(runs[name], f"nightly_rebuild {name}")
    assert [r[0][1]["engine"]["name"] for r in runs.values()] == ["spark", "in-process"]
    assert runs["in-process (by size)"][0][2] == runs["local[2]"][0][2]
    assert_named_resolved(json.loads((out / "_manifest.json").read_text()), data / "gen-store")


@pytest.mark.parametrize("targets", ["index,consumequeue", "consumequeue"])
def test_backfill_repairs_a_store_the_same_from_any_directory_on_both_engines(spark, base, monkeypatch, capsys,
                                                                             targets):
    store, pristine = base / "data" / "store-to-repair", base / "data" / "crashed-store"

    def fresh_copy() -> None:
        shutil.rmtree(store, ignore_errors=True)
        shutil.copytree(pristine, store)

    runners = [("rocketidx", ["backfill"], LOCAL2, slice(None)), ("rocketidx", ["backfill"], IN_PROCESS, slice(None))]
    if targets == "index,consumequeue":  # jobs/backfill.py as spark-submit runs it, from the unrelated directory
        runners.append(("backfill", [], LOCAL2, slice(2, 3)))
    repaired = []
    for prog, command, engine, where in runners:
        runs = run_everywhere(base, monkeypatch, capsys, prog, lambda t: [
            *command, "--store", t(store), "--targets", targets, "--timezone", "UTC", "--json", *engine],
            before=fresh_copy, after=lambda: files_of(store, skip=("index.backup", "consumequeue.backup")), where=where)
        assert_all_equal(runs, f"{prog} {' '.join(command)} --targets {targets} {' '.join(engine)}")
        assert runs[0][0] == 0 and runs[0][2] != files_of(pristine)  # it repaired something
        assert_named_resolved(runs[0][1], store)  # whichever directory it was typed in
        repaired.append(runs[0][2])
    assert all(r == repaired[0] for r in repaired)


def test_verify_store_reports_the_same_from_any_directory_on_both_engines(spark, base, monkeypatch, capsys):
    store = base / "data" / "crashed-store"
    before = files_of(store)
    reports = []
    for engine in (["--spark", "--master", "local[2]"], IN_PROCESS):
        runs = run_everywhere(base, monkeypatch, capsys, "rocketidx", lambda t: [
            "verify", "--store", t(store), "--json", *engine])
        assert_all_equal(runs, f"verify --store {' '.join(engine)}")
        assert runs[0][0] == 1  # the crash's damage, from any directory
        assert_named_resolved(runs[0][1], store)
        reports.append(runs[0])
    assert reports[0][0] == reports[1][0]
    assert files_of(store) == before  # scratch only
