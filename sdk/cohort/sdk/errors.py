"""The SDK's exceptions: each carries one line a person can act on (the CLI prints exactly that line)."""

from __future__ import annotations


class CohortError(Exception):
    """Base of every error the SDK raises on purpose."""


class ConfigError(CohortError):
    """Bad local input: an Anchorfile, a cluster name, a run config file, a wallet path."""


class WalletError(CohortError):
    """A keypair file is missing, unreadable or not a solana-keygen keypair."""


class RpcUnavailable(CohortError):
    """No RPC endpoint answered (after retries and fallbacks)."""


class RpcRefused(CohortError):
    """An RPC endpoint answered, but with an HTTP error status, a JSON-RPC error or something else than
    JSON-RPC (and so did every fallback)."""


class RunNotFound(CohortError):
    """No run with that id (or address) on this cluster and program."""


class RunExists(CohortError):
    """A run with that id already exists."""


class InsufficientFunds(CohortError):
    """The wallet cannot pay for what it is asked to send."""


class TransactionFailed(CohortError):
    """The cluster rejected a transaction for a reason that is not one of the program's own errors."""

    def __init__(self, message: str, logs: list[str] | None = None) -> None:
        super().__init__(message)
        self.logs = list(logs or [])


class ProgramError(TransactionFailed):
    """The coordinator program failed with one of its IDL errors.

    `name` and `msg` come from the IDL, `rule` is the validation rule the program logged (if any) and `logs`
    are the transaction's log lines.
    """

    def __init__(
        self, code: int, name: str, msg: str, logs: list[str], rule: str | None = None
    ) -> None:
        self.code, self.name, self.msg, self.rule = code, name, msg, rule
        detail = f": {rule}" if rule else ""
        super().__init__(f"{name} ({code}): {msg}{detail}", logs)
