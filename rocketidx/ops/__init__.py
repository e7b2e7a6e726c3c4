"""The operations: one entry point per thing rocketidx does, each taking one frozen request.

``build`` (:func:`rocketidx.ops.build.build`, :class:`rocketidx.config.BuildRequest`) ... Each operation
chooses its engine inside (:func:`rocketidx.ops.engine.engine_for`, the one place the rule is applied), runs
the library's steps, and returns a result object; turning flags into a request is :mod:`rocketidx.config`'s,
turning a result into text or JSON is :mod:`rocketidx.cli`'s. Backfill and repair are not here yet: they
still go through ``rocketidx.cli.backfill`` (issue 33, the other half).
"""
