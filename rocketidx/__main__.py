"""``rocketidx`` (the console script) and ``python -m rocketidx``: Ctrl-C and SIGTERM handled first, then
the command line (:func:`rocketidx.cli.main`).

Handling the signals before ``rocketidx.cli`` is imported matters: its imports (numpy, pyarrow) take a
noticeable part of a second, and a Ctrl-C then must end the command as quietly as one a minute later.
"""
import os
import sys

import rocketidx.interrupts as interrupts

# numpy's OpenBLAS starts a thread per core at import that spins for a while before it sleeps; nothing here
# multiplies matrices, and on a busy machine those spins take CPU from the build's own workers. Before numpy is
# imported, and only where the user has not chosen.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> int:
    return interrupts.run_interruptible("rocketidx", _cli, argv)


def _cli(argv: list[str] | None) -> int:
    from rocketidx.cli import main as run  # the heavy imports, after the handlers are in place
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
