"""Every commit point is durable (issue 12, point 1): a power cut can lose what was not synced, so the
file-system calls of a build and of a backfill are recorded and every published IndexFile must have been
synced (fdatasync) before the rename that published it and before the commit point (the output's
``current`` swap; the broker's checkpoint), and its directory synced before that commit point too."""
from __future__ import annotations

import os
import shutil

import pytest

from refdata import GOLDEN_CASES, load_case

from rocketidx.backfill.index import run_backfill
from rocketidx.build.in_process import build_index
from rocketidx.config import BuildConfig


class Calls:
    """Records syncs (by the path of the fd) and renames, in order."""

    def __init__(self, monkeypatch):
        self.log: list[tuple] = []
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)

            def sync(fd, _real=real):
                self.log.append(("sync", os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))))
                return _real(fd)
            monkeypatch.setattr(os, name, sync)
        for name in ("rename", "replace"):
            real = getattr(os, name)

            def move(src, dst, *a, _real=real, **kw):
                # realpath of the parent: the dst's own name may be a symlink about to be replaced
                self.log.append(("move", os.path.realpath(os.fspath(src)),
                                 os.path.join(os.path.realpath(os.path.dirname(os.fspath(dst))),
                                              os.path.basename(os.fspath(dst)))))
                return _real(src, dst, *a, **kw)
            monkeypatch.setattr(os, name, move)

    def first(self, kind: str, path: str, after: int = -1) -> int:
        """Index of the first ``kind`` call on ``path`` (a sync of it, or a move whose target it is)."""
        for i, c in enumerate(self.log):
            if i > after and c[0] == kind and (c[1] == path if kind == "sync" else c[2] == path):
                return i
        raise AssertionError(f"no {kind} of {path} in {self.log}")

    def synced_before(self, path: str, moment: int) -> bool:
        """Whether the file at ``path`` (following its moves back) was synced before ``moment``."""
        for i in range(moment - 1, -1, -1):
            c = self.log[i]
            if c[0] == "move" and c[2] == path:
                return self.synced_before(c[1], i)
            if c[0] == "sync" and c[1] == path:
                return True
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name an fd's file")
@pytest.mark.parametrize("workers", [1, 2])
def test_a_build_syncs_every_file_and_directory_before_its_commit_point(monkeypatch, tmp_path, workers):
    """The writers only start their files' writeback (one pass and pool tasks alike); the build syncs every
    file here, in this process, before the rename that publishes it."""
    case = GOLDEN_CASES[0]
    meta = load_case(case)
    config = BuildConfig(meta["hashSlotNum"], meta["indexNum"], meta["windowMillis"], "UTC")
    out = tmp_path / "out"
    build_index(case / "commitlog", out, config, time_index=None)  # a previous output to replace
    calls = Calls(monkeypatch)
    manifest, _ = build_index(case / "commitlog", out, config, time_index=None, workers=workers)
    version = os.path.realpath(out / "current")
    commit = calls.first("move", str(out.resolve() / "current"))
    for f in manifest["files"]:
        final = os.path.join(version, "index", f["name"])
        published = calls.first("move", final)
        assert calls.synced_before(final, published + 1), f"{f['name']} published before its data was synced"
        assert published < commit
    for d in (os.path.join(version, "index"), version):
        assert calls.first("sync", d) < commit, f"{d} not synced before the commit point"
    assert calls.first("sync", str(out.resolve()), after=commit) > commit  # the swap itself, then


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name an fd's file")
def test_a_backfill_syncs_what_it_installs_before_the_checkpoint(monkeypatch, tmp_path):
    from brokerstore import broker_store, crash
    store, files = broker_store(tmp_path, messages=6000)
    crash(store, files, keep=2, deleted=1)
    calls = Calls(monkeypatch)
    result = run_backfill(store, log=lambda *a: None)
    assert result.installed
    checkpoint = calls.first("move", str((store / "checkpoint").resolve()))
    index_dir = str((store / "index").resolve())
    for name in result.installed:
        final = os.path.join(index_dir, name)
        installed = calls.first("move", final)
        assert calls.synced_before(final, installed + 1) and installed < checkpoint
    assert calls.first("sync", index_dir) < checkpoint
    assert calls.first("sync", str(store.resolve()), after=checkpoint) > checkpoint


def test_gen_refuses_a_store_it_did_not_write(tmp_path, capsys):
    """Issue 12, point 7: a mistyped --out must not turn the sample generator into a data-loss tool."""
    from brokerstore import broker_store, snapshot

    from rocketidx.cli import main
    store, _ = broker_store(tmp_path, messages=2000)
    before = snapshot(store)
    args = ["gen", "--out", str(store), "--messages", "100", "--segment-bytes", "1m"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "did not write" in err and "--replace" in err
    assert snapshot(store) == before  # not a byte changed
    (store / "generator.json").unlink()
    broker = tmp_path / "broker"
    (broker / "commitlog").mkdir(parents=True)
    shutil.copy(next((store / "commitlog").iterdir()), broker / "commitlog")
    assert main(["gen", "--out", str(broker), "--messages", "100"]) == 2  # a bare CommitLog, no generator.json
    assert main(["gen", "--out", str(tmp_path / "new"), "--messages", "100"]) == 0
    assert main(["gen", "--out", str(tmp_path / "new"), "--messages", "200", "--seed", "2"]) == 0  # its own
    (tmp_path / "afile").write_text("x")
    assert main(["gen", "--out", str(tmp_path / "afile"), "--messages", "100"]) == 2
    assert main(args + ["--replace"]) == 0
    assert (store / "index").is_dir() and (store / "checkpoint").exists()  # only the CommitLog was replaced


def test_backfill_sees_a_flock_as_well_as_a_posix_lock(tmp_path):
    """Issue 12, point 6: both lock kinds on STORE/lock stop a backfill before anything moves."""
    import fcntl

    from brokerstore import broker_store, crash, snapshot

    from rocketidx.errors import StoreLockedError
    store, files = broker_store(tmp_path, messages=3000)
    crash(store, files, keep=1, deleted=1)
    before = snapshot(store)
    fd = os.open(store / "lock", os.O_RDWR)  # another open file description: flock conflicts with it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StoreLockedError, match="flock"):
            run_backfill(store, log=lambda *a: None)
    finally:
        os.close(fd)
    assert snapshot(store) == before
    assert run_backfill(store, log=lambda *a: None).installed  # released: it runs


def test_backfill_refuses_sizes_that_contradict_the_full_files(tmp_path, capsys):
    """Issue 12, point 8: a store built with 1009 slots / 3000 items; --hash-slots 509 fits the file size
    with index number 3,100, which would judge every file damaged and replace them all."""
    from brokerstore import broker_store, crash, snapshot

    from rocketidx.cli import main
    store, files = broker_store(tmp_path, messages=6000)
    crash(store, files, keep=2, deleted=1)
    before = snapshot(store)
    assert main(["backfill", "--store", str(store), "--in-process", "--hash-slots", "509"]) == 2
    err = capsys.readouterr().err
    assert "indexCount 3,000" in err and "contradict" in err and files[0]["name"] in err
    assert snapshot(store) == before
    assert main(["backfill", "--store", str(store), "--in-process"]) == 0  # sizes read off the files: fine
