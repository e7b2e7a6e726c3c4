"""``rocketidx ... | head -1``: when stdout's reader leaves, every command ends quietly (nothing on stderr,
exit 141 as ``cat`` or ``git log`` do), and a BrokenPipeError that is not stdout's is still an error.

Through real processes and pipes: a closed pipe is a property of file descriptors, which an in-process
``main()`` under pytest's capture never sees."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rocketidx import cli

ROCKETIDX = [sys.executable, "-m", "rocketidx"]


@pytest.fixture(scope="module")
def store_and_output(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pipe")
    store, out = root / "store", root / "out"
    assert cli.main(["gen", "--out", str(store), "--messages", "3000", "--segment-bytes", "256k", "--seed", "3"]) == 0
    assert cli.main(["build", "--commitlog", str(store), "--out", str(out), "--in-process"]) == 0
    return store, out


def commands(store: Path, out: Path, tmp: Path) -> dict[str, list[str]]:
    return {
        "stats": ["stats", "--index", str(out), "--in-process"],
        "verify": ["verify", "--index", str(out), "--commitlog", str(store), "--in-process"],
        "query": ["query", "--index", str(out), "--topic", "TopicA", "--key", "k"],
        "show": ["query", "--index", str(out), "--commitlog", str(store), "--queries", str(_queries(store, tmp)),
                 "--show"],
        "build": ["build", "--commitlog", str(store), "--out", str(tmp / "out2"), "--in-process", "--json"],
        "gen": ["gen", "--out", str(tmp / "store2"), "--messages", "100"],
        "timeindex": ["timeindex", "--commitlog", str(store), "--out", str(out / "_timeindex"), "--check"],
        "help": ["build", "--help"],
    }


def _queries(store: Path, tmp: Path) -> Path:
    """Lines asking for keys that are in the log, so --show prints messages."""
    import json

    from rocketidx.commitlog.segments import list_segments
    from rocketidx.commitlog.readers import read_segment
    batch, _ = read_segment(list_segments(store)[0], end=1 << 16)
    f = tmp / "q.jsonl"
    # A record without a uniq key asks for no key: a line with "key": null is refused since issue 31 item 6.
    f.write_text("\n".join(json.dumps({"topic": r["topic"], "key": r["uniq_key"]}) for r in batch.to_pylist()
                           if r["uniq_key"] is not None))
    return f


@pytest.mark.parametrize("name", ["stats", "verify", "query", "show", "build", "gen", "timeindex", "help"])
def test_a_reader_that_left_ends_the_command_quietly(store_and_output, tmp_path, name):
    """The reader closes its end before the command writes anything: the first write meets a closed pipe."""
    store, out = store_and_output
    argv = commands(store, out, tmp_path)[name]
    p = subprocess.Popen(ROCKETIDX + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    # argparse's --help swallows the error itself and exits 0; quiet either way.
    assert (p.wait(timeout=120), err) == (0 if name == "help" else cli.EXIT_READER_GONE, "")


def test_stats_piped_into_head_prints_its_first_line_and_nothing_on_stderr(store_and_output):
    """The reproducer: `rocketidx stats --index O | head -1`, as a shell runs it (pipefail shows our status:
    0 when everything fit in the pipe before head left, else 141; never 2, never a message)."""
    _, out = store_and_output
    cmd = " ".join(ROCKETIDX + ["stats", "--index", str(out), "--in-process"])
    r = subprocess.run(["bash", "-o", "pipefail", "-c", f"{cmd} | head -1"], capture_output=True, text=True,
                       timeout=120)
    assert r.stderr == "" and r.returncode in (0, cli.EXIT_READER_GONE)
    assert r.stdout.startswith(f"index {out}:") and r.stdout.count("\n") == 1


def test_a_broken_pipe_that_is_not_stdout_s_is_still_reported(tmp_path):
    """A BrokenPipeError from a socket or a child's pipe while stdout is fine: one line, exit 2, as any OSError."""
    script = ("import sys\nfrom rocketidx import cli\n"
              "def boom(a):\n    print('partial')\n    raise BrokenPipeError(32, 'Broken pipe')\n"
              "cli.COMMANDS['stats'] = boom\n"
              "sys.exit(cli.main(['stats', '--index', 'x']))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (2, "partial\n", "rocketidx stats: [Errno 32] Broken pipe\n")
