"""cohort.localnet — a LiteSVM-backed Solana validator behind the standard JSON-RPC and pubsub API."""
