"""``rocketidx`` (the console script) and ``python -m rocketidx``: Ctrl-C and SIGTERM handled first, then
the command line (:func:`rocketidx.cli.main`).

Handling the signals before ``rocketidx.cli`` is imported matters: its imports (numpy, pyarrow) take a
noticeable part of a second, and a Ctrl-C then must end the command as quietly as one a minute later.
"""
import sys

from rocketidx import interrupts


def main(argv: list[str] | None = None) -> int:
    interrupts.install()
    try:
        from rocketidx.cli import main as run
        return run(argv)
    except BaseException as e:  # before the command's own handler was reached
        stop = interrupts.caught(e)
        if stop is None:
            raise
        print(f"rocketidx: {stop.message()}", file=sys.stderr)
        return interrupts.EXIT_STATUS


if __name__ == "__main__":
    sys.exit(main())
