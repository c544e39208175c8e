"""Log storage: segments, indexes, the partition log, recovery, retention, compaction.

Modules, one concept each: ``config`` (LogConfig), ``segment`` with ``offset_index`` and
``time_index`` (plus ``txn_index``), ``log`` (Log: append, read, recovery, retention,
truncation, flush), ``log_manager`` (all logs of a data directory, checkpoints, clean
shutdown), ``file_region`` (zero-copy reads), ``checkpoint`` and ``partition_metadata``
(small text files), ``leader_epoch``, ``producer_state`` and ``cleaner``.
"""
