"""The manual's local spark-submit recipe runs as written, as a newcomer would run it after ``make setup``:
a fresh shell (no SPARK_HOME, no PYSPARK_* variables, the venv not on PATH) in a directory laid out like
the project root, the block taken from the markdown itself (README.md or docs/*.md, wherever the section
"spark-submit: the nightly job" is), so an edit that breaks it fails here.

The directory is a scratch one holding ``.venv`` and ``jobs`` as links to this checkout's, so what the
recipe writes (``dist/``, ``sample/``) lands there and not in the checkout.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from readme_doc import logical_lines, parse_command, read_all, shell_blocks
from splitread import same_build

from rocketidx.build.in_process import build_index
from rocketidx.cli.build import add_build_arguments
from rocketidx.config import load_config

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SECTION = "spark-submit: the nightly job"


def local_recipe() -> str:
    """The shell block of the nightly job's section whose spark-submit runs on a local master."""
    blocks, _ = read_all()
    found = [b for b in shell_blocks(blocks) if any(SECTION in h for h in b.headings)
             and any(c.program == "spark-submit" and "--master" in c.args
                     and c.args[c.args.index("--master") + 1].strip("'\"").startswith("local")
                     for line in logical_lines(b.text) for c in parse_command(line))]
    assert len(found) == 1, (f"section {SECTION!r} of README.md and docs/*.md: expected one block running "
                             f"spark-submit locally, found {[b.where for b in found]}")
    return found[0].text


def fresh_shell_env(tmp: Path) -> dict[str, str]:
    """This process's environment as a new terminal would have it: nothing Spark or venv related."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_", "PYSPARK_", "_PYSPARK")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env["TMPDIR"] = str(tmp)
    return env


def test_the_spark_submit_recipe_runs_as_written(tmp_path, monkeypatch):
    recipe = local_recipe()
    job = next(c for line in logical_lines(recipe) for c in parse_command(line)
               if c.program == "jobs/nightly_rebuild.py")
    work = tmp_path / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(sys.prefix, target_is_directory=True)  # the venv `make setup` makes
    (work / "jobs").symlink_to(ROOT / "jobs", target_is_directory=True)
    script = work / "recipe.sh"
    script.write_text("set -euo pipefail\n" + recipe + "\n")

    p = subprocess.run(["bash", str(script)], cwd=work, env=fresh_shell_env(tmp_path), capture_output=True,
                       text=True, timeout=300, start_new_session=True)
    assert p.returncode == 0, f"the recipe failed (exit {p.returncode}):\n{p.stderr[-4000:]}"
    assert "Failed to delete" not in p.stderr, p.stderr[-4000:]

    # The job's own flags, read as the job reads them: the output it committed is the in-process build's.
    parser = argparse.ArgumentParser()
    add_build_arguments(parser, engine_flag=False)
    a = parser.parse_args(shlex.split(" ".join(job.args)))
    out = work / a.out
    assert (out / "_SUCCESS").exists() and (out / "_manifest.json").exists(), sorted(os.listdir(out))
    expected = tmp_path / "expected"
    cfg = load_config(a.conf or ROOT / "conf" / "defaults.json", hash_slot_num=a.hash_slots, index_num=a.index_num,
                      window_ms=a.window, timezone=a.timezone, check_crc=False if a.no_crc else None)
    monkeypatch.chdir(work)  # the manifest names the CommitLog as the job was given it
    build_index(a.commitlog, expected, cfg)
    assert same_build(expected, out) == []
