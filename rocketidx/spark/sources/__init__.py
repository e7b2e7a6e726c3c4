"""Spark data sources: ``rocketmq-commitlog`` (commitlog.py) and ``rocketmq-index`` (index.py).
"""
