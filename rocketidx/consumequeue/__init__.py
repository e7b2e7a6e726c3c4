"""The ConsumeQueue format: where each dispatched entry lands (placement: putMessagePositionInfo's rules), the
queue files (writer), and a restarted broker's answers (reader: recover, correctMinOffset, get).
"""
