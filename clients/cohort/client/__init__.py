"""cohort.client — the training client: follow the chain, train with DisTrO, share results peer to peer."""
