"""``make dist``'s failure paths (rocketidx/packaging/ship.py): each is one typed line naming what failed, and none
leaves an archive in ``dist/``. The archive itself is built and used by the cluster tests
(tests/spark/test_cluster.py)."""
from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

import pytest

import rocketidx.packaging.ship as ship
from rocketidx.errors import RocketIdxError


def _tar(path: Path, names: list[str]) -> None:
    with tarfile.open(path, "w:gz") as t:
        for n in names:
            info = tarfile.TarInfo(n)
            info.size = 1
            t.addfile(info, io.BytesIO(b"x"))


def test_a_failing_step_is_one_line_with_its_exit_code_and_last_words():
    with pytest.raises(RocketIdxError) as e:
        ship._run([sys.executable, "-c", "import sys; print('noise'); sys.exit('pip: no matching distribution')"],
                  "installing numpy")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("make dist: installing numpy failed (exit 1)") and "no matching distribution" in msg


def _fake_steps(monkeypatch, packed: list[str], which="/usr/bin/venv-pack"):
    """build_env's subprocesses replaced: venv-pack 'packs' a tar holding ``packed``."""
    calls = []

    def run(cmd, what, cwd=None):
        calls.append(what)
        if what == "creating the environment":
            Path(cmd[-1]).mkdir()
        if what == "venv-pack":
            _tar(Path(cmd[cmd.index("--output") + 1]), packed)
    monkeypatch.setattr(ship, "_run", run)
    monkeypatch.setattr(ship.shutil, "which", lambda *a, **k: which)
    return calls


def test_a_relative_out_lands_under_the_working_directory(tmp_path, monkeypatch):
    """``make dist`` passes ``--out dist``; the steps run from / (so that pip never sees the checkout's own
    rocketidx), so each path they are given must be absolute."""
    so = "lib/python3.11/site-packages/rocketidx/_native.cpython-311-x86_64-linux-gnu.so"

    def run(cmd, what, cwd=None):
        where = cwd or Path("/")  # what a subprocess started in ``cwd`` makes of a relative path
        if what == "building the wheel":
            wheels = where / cmd[cmd.index("--wheel-dir") + 1]
            wheels.mkdir(parents=True, exist_ok=True)
            (wheels / "rocketidx-0.1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
        elif what == "creating the environment":
            (where / cmd[-1]).mkdir(parents=True)
        elif what == "venv-pack":
            _tar(where / cmd[cmd.index("--output") + 1], [so, "bin/python"])
    monkeypatch.setattr(ship, "_run", run)
    monkeypatch.setattr(ship.shutil, "which", lambda *a, **k: "/usr/bin/venv-pack")
    monkeypatch.setattr(ship, "ROOT", tmp_path / "checkout")
    monkeypatch.chdir(tmp_path)
    r = ship.build_dist("dist", log=lambda *_: None)
    dist = tmp_path / "dist"
    assert sorted(p.name for p in dist.iterdir()) == sorted([
        ship.ENV_ARCHIVE, "rocketidx-0.1.0-cp311-cp311-linux_x86_64.whl", "rocketidx.zip"])
    assert r["env"] == str(dist / ship.ENV_ARCHIVE) and r["kernel"] == [so]


def test_without_venv_pack_it_says_how_to_get_it_and_writes_no_archive(tmp_path, monkeypatch):
    _fake_steps(monkeypatch, [], which=None)
    with pytest.raises(RocketIdxError, match=r"venv-pack is not installed \(pip install venv-pack\)"):
        ship.build_env(tmp_path / "rocketidx-0.1.0.whl", tmp_path, tmp_path / "env")
    assert not list(tmp_path.glob("*.tar.gz*"))


def test_a_wheel_without_the_kernel_is_refused_and_no_archive_is_left(tmp_path, monkeypatch):
    calls = _fake_steps(monkeypatch, ["lib/python3.11/site-packages/rocketidx/__init__.py",
                                      "bin/python"])
    with pytest.raises(RocketIdxError, match=r"rocketidx-0\.1\.0\.whl holds no rocketidx/_native\*\.so.*numpy reader"):
        ship.build_env(tmp_path / "rocketidx-0.1.0.whl", tmp_path, tmp_path / "env")
    assert calls[-1] == "venv-pack"
    assert not list(tmp_path.glob("*.tar.gz*"))  # neither the archive nor its temporary


def test_an_archive_with_the_kernel_lands_under_its_name(tmp_path, monkeypatch):
    so = "lib/python3.11/site-packages/rocketidx/_native.cpython-311-x86_64-linux-gnu.so"
    _fake_steps(monkeypatch, [so, "bin/python"])
    out = ship.build_env(tmp_path / "rocketidx-0.1.0.whl", tmp_path, tmp_path / "env")
    assert out == tmp_path / ship.ENV_ARCHIVE and ship.kernel_in(out) == [so]
    assert out.stat().st_mode & 0o777 == 0o644  # others may read it: a cluster's submitter need not be its builder
    assert not (tmp_path / (ship.ENV_ARCHIVE + ".tmp")).exists()


def test_the_command_exits_2_with_the_one_line(monkeypatch, capsys):
    def fail(dest, log=print):
        raise RocketIdxError("make dist: building the wheel failed (exit 1): error: no compiler")
    monkeypatch.setattr(ship, "build_dist", fail)
    assert ship.main(["--out", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "make dist: building the wheel failed (exit 1): error: no compiler"
