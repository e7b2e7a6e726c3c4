"""IndexFiles (+ CommitLog) -> problems named by file and byte offset: the structure and content checks
(core), the pure content rules both engines call (content), and the report.
"""
