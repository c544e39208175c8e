"""Log storage: segments, indexes, the partition log, recovery, retention, compaction.

Modules, one concept each: ``config`` (LogConfig), ``segment`` with ``offset_index`` and
``time_index`` (plus ``txn_index``), ``log`` (Log: state, appends, rolls, lifecycle)
with ``log_loader`` (opening, recovery), ``log_append`` (per-batch checks of an append),
``log_read``, ``log_flush``, ``log_retention`` and ``log_truncation``, ``log_manager``
(all logs of a data directory, checkpoints, clean shutdown), ``file_region`` (zero-copy
reads), ``checkpoint`` and ``partition_metadata`` (small text files), ``leader_epoch``,
``producer_state``, and compaction: ``log_cleaner`` (the cleaner threads) over ``cleaner``
(one pass) with ``cleaner_plan``, ``offset_map``, ``cleaner_filter``, ``cleaner_txn``,
``cleaner_read`` and ``cleaner_result``.
"""
