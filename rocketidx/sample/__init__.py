"""The sample store: CommitLogs written the way a broker writes them, for ``rocketidx gen``, ``demo`` and the tests
(not part of any build, query or repair)."""

DEMO_MESSAGES = 300_000  # the sample store `make run` generates (rocketidx demo)
