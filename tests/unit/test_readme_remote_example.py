"""The README's remote-store example runs as written: its block under "Remote stores", run by bash from
the repository root, starts a local S3 server, builds into it and reads the output back, every command
exiting 0."""
from __future__ import annotations

import os
import subprocess

import pytest

from readme_doc import README, read_readme

pytestmark = pytest.mark.slow


def remote_example() -> str:
    blocks, _ = read_readme()
    found = [b.text for b in blocks if b.headings and b.headings[-1].startswith("Remote stores")
             and "moto_server" in b.text]
    assert len(found) == 1, "the README's remote-store example (a block starting moto_server) is missing"
    return found[0]


def test_the_readme_remote_example_runs_as_written(tmp_path):
    script = "set -euo pipefail\ntrap 'kill %1 2>/dev/null || true' EXIT\n" + remote_example()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # only what the example sets
    done = subprocess.run(["bash", "-c", script], cwd=README.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "read " in done.stderr and "bytes from remote storage" in done.stderr  # -v query
    assert "clean" in done.stdout  # verify
