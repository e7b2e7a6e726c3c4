"""Repairing a stopped broker's store: plan, staged rebuild, backup, atomic install, checkpoint, roll back.
"""
