"""The transaction coordinator: transactional producers, exactly-once (KIP-98).

One module per concept: ``state`` (the per-transactional-id state machine), ``log_records``
(its Kafka-format records in ``__transaction_state``), ``state_topic`` (that topic as the
coordinator sees it), ``markers`` (writing COMMIT/ABORT control batches), ``coordinator``
(the protocol logic, loading and timeouts) and ``handlers`` (the wire APIs).
"""
