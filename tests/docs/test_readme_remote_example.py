"""The remote-store example runs as written: its block under a "Remote stores" heading (README.md or
docs/*.md, wherever it is), run by bash from the repository root, starts a local S3 server, builds into it
and reads the output back, every command exiting 0."""
from __future__ import annotations

import os
import subprocess

import pytest

from readme_doc import ROOT, read_all

pytestmark = pytest.mark.slow


def remote_example() -> str:
    blocks, _ = read_all()
    found = [b for b in blocks if any(h.startswith("Remote stores") for h in b.headings) and "moto_server" in b.text]
    assert len(found) == 1, ("expected one remote-store example (a block starting moto_server under a "
                             f"'Remote stores' heading) in README.md and docs/*.md, found {[b.where for b in found]}")
    return found[0].text


def test_the_remote_example_runs_as_written(tmp_path):
    script = "set -euo pipefail\ntrap 'kill %1 2>/dev/null || true' EXIT\n" + remote_example()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # only what the example sets
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "read " in done.stderr and "bytes from remote storage" in done.stderr  # -v query
    assert "clean" in done.stdout  # verify
