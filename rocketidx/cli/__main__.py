"""``python -m rocketidx.cli``: the same command line as ``python -m rocketidx`` and the ``rocketidx`` script."""
import sys

import rocketidx.interrupts as interrupts
from rocketidx.cli import main

if __name__ == "__main__":
    sys.exit(interrupts.run_interruptible("rocketidx", main, None))
