"""cohort.sdk — the Python SDK and `cohort` CLI: wallets, deploy, create and steer runs, query status."""
