"""`pip install -e .` (what `make setup`/`make run` do first) prints no warning from the build backend and
still builds the compiled kernel; a wheel carries the quiet Spark log settings. Runs pip on a copy of the
package sources, installing into a throwaway venv (`pip --python`): pip uninstalls an installed rocketidx
from the environment it installs into, even with --prefix, so never this one."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
# pip's own notices about its configuration (an --extra-index-url directory that does not exist on this
# machine, say) are the machine's, not the package's.
PIP_CONFIG_NOTICE = re.compile(r"^(\x1b\[\d+m)*WARNING: Location '.*' is ignored")


def copy_sources(dest: Path) -> Path:
    src = dest / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "rocketidx", src / "rocketidx",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
    return src


def pip(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def backend_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines()
            if line.strip() and not PIP_CONFIG_NOTICE.match(line) and line.strip() != "\x1b[0m"]


def test_an_editable_install_prints_nothing_and_builds_the_kernel(tmp_path):
    src = copy_sources(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    done = pip("--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-deps", "-e", str(src),
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # before: setuptools' "Editable installation ... Please be careful with folders in your working
    # directory" warning box, 10 lines on stderr
    assert backend_lines(done) == []
    assert list((src / "rocketidx").glob("_native*.so")), "the compiled kernel was not built"


def test_a_wheel_carries_the_quiet_spark_log_settings(tmp_path):
    src = copy_sources(tmp_path)
    done = pip("wheel", "--quiet", "--no-deps", str(src), "-w", str(tmp_path / "dist"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    wheel, = (tmp_path / "dist").glob("rocketidx-*.whl")
    assert "rocketidx/spark/log4j2-quiet.properties" in zipfile.ZipFile(wheel).namelist()
