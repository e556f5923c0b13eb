"""Layer 3: reading a run's past — lineage walks, graphs known here, the state at a
checkpoint — and writing the first records of a new run. Used by the engine and by
time travel alike; imports only the store, graph and core layers."""
