"""The operations: one entry point per thing rocketidx does, each taking one frozen request.

=========  ==========================================  =============================================
module     entry point                                 request (made in :mod:`rocketidx.config`)
=========  ==========================================  =============================================
build      :func:`rocketidx.ops.build.build`           :class:`rocketidx.config.BuildRequest`
stats      :func:`rocketidx.ops.stats.stats`           :class:`rocketidx.config.StatsRequest`
verify     :func:`rocketidx.ops.verify.verify`         :class:`rocketidx.config.VerifyRequest`
query      :func:`rocketidx.ops.query.query`           :class:`rocketidx.config.QueryRequest`
timeindex  :func:`rocketidx.ops.timeindex.timeindex`   :class:`rocketidx.config.TimeIndexRequest`
backfill   :func:`rocketidx.ops.backfill.backfill`     :class:`rocketidx.config.BackfillRequest`
=========  ==========================================  =============================================

Each operation chooses its engine inside (:func:`rocketidx.ops.engine.engine_for`, the one place the rule
is applied), runs the library's steps, and returns a result object (query: one answer at a time); turning
flags into a request is :mod:`rocketidx.config`'s, turning a result into text or JSON :mod:`rocketidx.cli`'s.
"""
