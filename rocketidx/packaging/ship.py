"""``make dist``: what a cluster's executors need, built from this checkout.

Out, in ``dist/``:

* ``rocketidx-<version>-<tags>.whl``: the package, with the compiled kernel (``rocketidx/_native*.so``);
* ``rocketidx-env.tar.gz``: a packed virtual environment holding numpy, pyarrow, pandas (the versions this
  environment has, so that the driver and the executors agree) and that wheel, not pyspark (Spark gives its
  executors their own); for ``spark-submit --archives dist/rocketidx-env.tar.gz#env --conf
  spark.pyspark.python=./env/bin/python``;
* ``rocketidx.zip``: the sources alone, for a cluster that cannot take an archive (``--py-files``): its
  executors run the numpy reader, about 5x slower, and the build summary says so.

Why venv-pack rather than pex: Spark unpacks an ``--archives`` entry itself on every executor (YARN, Kubernetes
and standalone alike) and the job names ``./env/bin/python``; the archive is a plain venv, so what is in it
can be listed and checked (the tests check the kernel is). What it needs on every host: the same Python, at
the same path, as the one that made it (a venv's ``bin/python`` is a link to its base interpreter); pex would
need the same Python version and ABI too, and adds its own bootstrap at every worker start.

Stays true: the environment is built from the wheel, never from an editable install pointing back at this
checkout; a failed step leaves no half-written archive in ``dist/`` (each file is written beside its final
name and renamed).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from importlib import metadata
from pathlib import Path

from rocketidx.errors import RocketIdxError

ROOT = Path(__file__).resolve().parents[2]
ENV_ARCHIVE = "rocketidx-env.tar.gz"
EXECUTOR_PACKAGES = ("numpy", "pyarrow", "pandas")  # what rocketidx imports on an executor
PACK_EXCLUDES = ("*/tests/*", "*/include/*", "lib/python*/site-packages/pyarrow/src/*")


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    # Not this checkout's directory, nor its PYTHONPATH: ``python -m pip`` would find the checkout's own
    # rocketidx there and call the wheel installed already.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd or Path("/"), env=env)
    if p.returncode != 0:
        last = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RocketIdxError(f"make dist: {what} failed (exit {p.returncode}): {last[0]}")


def build_wheel(dest: Path) -> Path:
    """The project's wheel (the compiled kernel inside), in ``dest``; an earlier wheel there is replaced."""
    for old in dest.glob("rocketidx-*.whl"):
        old.unlink()
    scratch = dest / ".wheel-tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(scratch), str(ROOT)],
         "building the wheel")
    [wheel] = scratch.glob("rocketidx-*.whl")
    target = dest / wheel.name
    os.replace(wheel, target)
    shutil.rmtree(scratch)
    return target


def build_env(wheel: Path, dest: Path, work: Path) -> Path:
    """A fresh venv with the executor packages and ``wheel``, packed by venv-pack into ``dest``."""
    shutil.rmtree(work, ignore_errors=True)
    # No pip nor setuptools in it (an executor installs nothing): this environment's pip installs into it.
    _run([sys.executable, "-m", "venv", "--without-pip", str(work)], "creating the environment")
    pins = [f"{name}=={metadata.version(name)}" for name in EXECUTOR_PACKAGES]
    pip = [sys.executable, "-m", "pip", "--python", str(work / "bin" / "python"), "install", "--quiet",
           "--disable-pip-version-check"]
    _run(pip + pins, f"installing {', '.join(pins)}")
    _run(pip + ["--no-deps", str(wheel)], "installing the wheel")
    packer = shutil.which("venv-pack", path=str(Path(sys.executable).parent)) or shutil.which("venv-pack")
    if packer is None:
        raise RocketIdxError("make dist: venv-pack is not installed (pip install venv-pack)")
    tmp = dest / (ENV_ARCHIVE + ".tmp")
    tmp.unlink(missing_ok=True)
    # Every application's driver and executors unpack the archive again: the packages' test suites, C headers
    # and sources are a third of its files and nothing imports them.
    excludes = [arg for pattern in PACK_EXCLUDES for arg in ("--exclude", pattern)]
    _run([packer, "--prefix", str(work), "--output", str(tmp), "--format", "tar.gz", "--quiet", *excludes],
         "venv-pack")
    if not kernel_in(tmp):
        tmp.unlink()
        raise RocketIdxError(f"make dist: {wheel.name} holds no rocketidx/_native*.so (it was built without a C "
                             "compiler or the zlib headers): executors would run the numpy reader")
    target = dest / ENV_ARCHIVE
    os.chmod(tmp, 0o644)  # venv-pack leaves it readable by its owner alone, like a temporary file
    os.replace(tmp, target)
    shutil.rmtree(work)
    return target


def kernel_in(archive: Path) -> list[str]:
    """The compiled kernel's files inside a packed environment (none: the executors would run numpy)."""
    with tarfile.open(archive) as t:
        return [n for n in t.getnames() if "/rocketidx/_native" in f"/{n}" and n.endswith(".so")]


def build_dist(dest: str | os.PathLike = ROOT / "dist", log=print) -> dict:
    """``make dist``: the wheel, the environment archive and the zip in ``dest``; their sizes and the time."""
    from rocketidx.spark.session import build_py_files
    t0 = time.monotonic()
    dest = Path(dest).resolve()  # the steps run from / (see _run): a relative path would land there
    dest.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(dest)
    log(f"wheel: {wheel}")
    env = build_env(wheel, dest, ROOT / "build" / "dist-env")
    kernel = kernel_in(env)
    log(f"environment: {env} ({env.stat().st_size / 1e6:.0f} MB; {kernel[0]})")
    zipped = build_py_files(dest)
    log(f"zip (the fallback, numpy reader only): {zipped}")
    return {"wheel": str(wheel), "env": str(env), "env_bytes": env.stat().st_size, "kernel": kernel,
            "zip": str(zipped), "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rocketidx.packaging.ship", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "dist"), help="where the wheel, the archive and the zip go")
    a = ap.parse_args(argv)
    try:
        r = build_dist(a.out)
    except RocketIdxError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"make dist: {r['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
