"""The IndexFile format: entries -> time windows -> files (writer), files -> items and slots (reader), and
queryOffset (lookup). The ConsumeQueue format gets a folder of its own beside this one.
"""
