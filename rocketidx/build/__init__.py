"""One build: planning (plan), the one function that writes window files (write), the direct plan's tasks
(direct), their typed results (results), the checks and the commit (finish), the summary, the in-process
builds (local) and the engine choice (engine).
"""
