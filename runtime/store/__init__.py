"""Layer 2: the ``CheckpointStore`` protocol and its implementations (memory, SQL)."""
