"""Talking to a cluster: solana-py's AsyncClient with retries, fallback URLs and readable failures.

Transient failures (connection refused or reset, timeouts, HTTP 5xx) are retried with exponential backoff,
then the next URL is tried; a request fails with `RpcUnavailable` only when every URL failed. HTTP 429 waits
as long as the cluster's `Retry-After` asks (within a time budget, without using up retries) and tells the
throttle listeners, so bulk senders such as deploy slow down. Any other HTTP status (401, 403, 404, ...), a
JSON-RPC error answer or a body that is not JSON-RPC is `RpcRefused`: one line naming the URL, the method and
the status, after the fallback URLs were tried too. A transaction
that the cluster rejects comes back as `ProgramError` (the coordinator's IDL error name, message, the rule it
logged, and the logs), `InsufficientFunds`, or `TransactionFailed`. Transactions are legacy messages, so the
loader's write chunks (sized for legacy messages) fit.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus
from typing import Any, TypeVar

import httpx2
from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import _COMMITMENT_TO_SOLDERS, AsyncClient
from solana.rpc.commitment import Commitment, Confirmed
from solana.rpc.core import RPCException, RPCNoResultException
from solana.rpc.models import DataSliceOpts, MemcmpOpts, TxOpts
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction

from cohort.localnet.codec import b58encode

from .errors import (
    CohortError,
    InsufficientFunds,
    ProgramError,
    RpcRefused,
    RpcUnavailable,
    TransactionFailed,
)
from .idl import Idl
from .pacing import AdaptiveLimit

log = logging.getLogger("cohort.sdk.rpc")
T = TypeVar("T")

_CUSTOM = re.compile(r"Custom\((\d+)\)")
_PROGRAM_LOG = "Program log: "
BLOCKHASH_REUSE = 1.0  # seconds a fetched blockhash is used for new transactions
_DUPLICATE_RETRIES = (
    100  # blockhash polls (0.1 s apart) when an identical transaction already landed
)


def _unwrap(exc: BaseException) -> BaseException:
    """solana-py wraps httpx2's errors in SolanaRpcException; the cause says what happened."""
    return exc.__cause__ if isinstance(exc, SolanaRpcException) and exc.__cause__ else exc


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed request (None when the failure was not an HTTP answer)."""
    cause = _unwrap(exc)
    return cause.response.status_code if isinstance(cause, httpx2.HTTPStatusError) else None


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the request may not have reached the cluster, or the cluster asked us to back off."""
    if isinstance(exc, SolanaRpcException) and exc.__cause__ is None:
        return True
    cause = _unwrap(exc)
    if isinstance(cause, asyncio.TimeoutError | OSError | httpx2.TransportError):
        return True
    status = http_status(cause)
    return status is not None and (status == 429 or status >= 500)


def retry_after(exc: BaseException, now: float | None = None) -> float | None:
    """Seconds a 429/503 answer asks us to wait (`Retry-After`: seconds or an HTTP date), if it says."""
    cause = _unwrap(exc)
    if not isinstance(cause, httpx2.HTTPStatusError):
        return None
    value = cause.response.headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def _status_text(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


_STATUS_HINTS = {
    401: "the endpoint wants credentials: put the full URL with its API key in --cluster",
    403: "the endpoint refused access: check its API key or allowed origins",
    404: "nothing answers JSON-RPC at that path: check the URL",
    405: "that URL does not take JSON-RPC POSTs: check the URL",
    413: "the request is too large for this endpoint",
}


def _describe(exc: BaseException) -> str:
    """A failure as a few words for the one error line."""
    status = http_status(exc)
    if status is not None:
        hint = _STATUS_HINTS.get(status)
        return _status_text(status) + (f"; {hint}" if hint else "")
    cause = _unwrap(exc)
    if isinstance(cause, RPCException):
        detail = cause.args[0] if cause.args else cause
        message = getattr(detail, "message", None) or str(detail)
        return f"JSON-RPC error: {message}"
    if type(cause).__name__ == "SerdeJSONError" or isinstance(cause, RPCNoResultException):
        return "the answer is not a JSON-RPC response"
    text = str(cause) or type(cause).__name__
    return f"{type(cause).__name__}: {text}" if text != type(cause).__name__ else text


def _is_refusal(exc: BaseException) -> bool:
    """An answer that retrying the same URL will not change: an HTTP error status, a JSON-RPC error, junk."""
    cause = _unwrap(exc)
    return (
        http_status(cause) is not None
        or isinstance(cause, RPCException | RPCNoResultException)
        or type(cause).__name__ == "SerdeJSONError"
        or isinstance(cause, httpx2.HTTPError)
    )


def failure_from_logs(err: object, logs: Sequence[str], idl: Idl | None) -> TransactionFailed:
    """The exception for a failed transaction, from its error and logs."""
    logs = list(logs)
    text = str(err)
    match = _CUSTOM.search(text)
    if match and idl is not None:
        known = idl.error(int(match.group(1)))
        if known is not None:
            # the program logs the rule a validation failed on just before it returns the error
            rules = [
                line.removeprefix(_PROGRAM_LOG) for line in logs if line.startswith(_PROGRAM_LOG)
            ]
            rule = rules[-1] if rules else None
            return ProgramError(known.code, known.name, known.msg, logs, rule)
    lowered = (text + " " + " ".join(logs)).lower()
    if "insufficient" in lowered and ("fund" in lowered or "lamports" in lowered):
        return InsufficientFunds(f"the wallet cannot pay for this transaction ({text})")
    if "accountnotfound" in lowered.replace(" ", "") and "debit" in lowered:
        return InsufficientFunds("the fee payer has no SOL (fund it with `cohort wallet airdrop`)")
    return TransactionFailed(f"transaction failed: {text}", logs)


class Rpc:
    """One logical connection to a cluster over one or more RPC URLs."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        idl: Idl | None = None,
        commitment: Commitment = Confirmed,
        retries: int = 3,
        backoff: float = 0.2,
        timeout: float = 15.0,
        confirm_timeout: float = 90.0,
        throttle_budget: float = 120.0,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError("Rpc needs at least one URL")
        if retries < 1:
            raise ValueError(f"retries must be >= 1, got {retries}")
        self.idl = idl
        self.commitment = commitment
        self.retries, self.backoff, self.confirm_timeout = retries, backoff, confirm_timeout
        # seconds one request may spend waiting out 429s (Retry-After) before it gives up
        self.throttle_budget = throttle_budget
        self.throttled = 0  # 429 answers seen
        self.throttle_listeners: list[Callable[[], None]] = []
        self.pacer: AdaptiveLimit | None = None  # paces every request while a bulk sender runs
        self._blockhash: tuple[float, Any] | None = (
            None  # (monotonic time, getLatestBlockhash answer)
        )
        self._clients = [
            AsyncClient(url, commitment=commitment, timeout=timeout, max_transport_retries=0)
            for url in self.urls
        ]
        self._current = 0  # the URL that answered last: start there next time
        self._quiet_until = [0.0] * len(self.urls)  # monotonic time each URL's Retry-After ends

    async def close(self) -> None:
        for client in self._clients:
            await client.close()

    async def __aenter__(self) -> Rpc:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        return self.urls[self._current]

    # -- the retry/fallback core ----------------------------------------------------------------------
    async def call(self, what: str, request: Callable[[AsyncClient], Awaitable[T]]) -> T:
        """Run `request` against the current URL, retrying transient failures, then the other URLs."""
        errors: list[str] = []
        refusals: list[str] = []
        n = len(self._clients)
        for k in range(n):
            index = (self._current + k) % n
            client = self._clients[index]
            attempt, waited = 0, 0.0
            while attempt < self.retries:
                quiet = self._quiet_until[index] - time.monotonic()
                if quiet > 0:  # the URL asked every request of ours to wait (Retry-After)
                    await asyncio.sleep(quiet)
                if self.pacer is not None:
                    await self.pacer.pace()
                try:
                    result = await request(client)
                except CohortError:
                    raise  # already one clear line (a rejected transaction, a refused airdrop)
                except Exception as exc:
                    if http_status(exc) == 429:
                        wait = self._throttle_wait(exc, attempt + len(errors))
                        if waited + wait <= self.throttle_budget:
                            self._quiet_until[index] = max(
                                self._quiet_until[index], time.monotonic() + wait
                            )
                            self._note_throttle(what, self.urls[index], wait)
                            waited += wait
                            continue  # after the quiet time
                        errors.append(f"{self.urls[index]}: rate-limited (HTTP 429) for over "
                                      f"{self.throttle_budget:.0f} s")  # fmt: skip
                        break
                    if not is_transient(exc):
                        if not _is_refusal(exc):
                            raise
                        refusals.append(
                            f"the RPC at {self.urls[index]} answered {what} with {_describe(exc)}"
                        )
                        break  # the same URL would answer the same: try the next one
                    errors.append(f"{self.urls[index]}: {_describe(exc)}")
                    log.debug(
                        "%s failed on %s (attempt %d): %s", what, self.urls[index], attempt + 1, exc
                    )
                    attempt += 1
                    if attempt < self.retries:
                        await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
                    continue
                if self.pacer is not None:
                    self.pacer.request_done()
                if index != self._current:
                    log.info("RPC fallback: %s now goes to %s", what, self.urls[index])
                self._current = index
                return result
        if refusals:
            raise RpcRefused(refusals[0])
        where = ", ".join(self.urls)
        last = errors[-1].split(": ", 1)[-1] if errors else "no answer"
        raise RpcUnavailable(f"cannot reach the RPC at {where} ({last})")

    def _throttle_wait(self, exc: BaseException, attempt: int) -> float:
        asked = retry_after(exc)
        if asked is not None:
            return asked
        return min(self.backoff * 2 ** min(attempt, 10), 10.0)

    def _note_throttle(self, what: str, url: str, wait: float) -> None:
        self.throttled += 1
        log.info("%s: %s is rate-limiting (HTTP 429); waiting %.1f s", what, url, wait)
        for listener in self.throttle_listeners:
            listener()

    # -- reads ----------------------------------------------------------------------------------------
    async def account_data(self, address: Pubkey) -> bytes | None:
        info = await self.call("getAccountInfo", lambda c: c.get_account_info(address))
        return None if info.value is None else bytes(info.value.data)

    async def account_owner_and_data(self, address: Pubkey) -> tuple[Pubkey, bytes] | None:
        info = await self.call("getAccountInfo", lambda c: c.get_account_info(address))
        return None if info.value is None else (info.value.owner, bytes(info.value.data))

    async def account_slice(
        self, address: Pubkey, offset: int, length: int
    ) -> tuple[Pubkey, bytes] | None:
        """Owner and `length` bytes of the account's data from `offset` (getAccountInfo with dataSlice):
        what a client following one part of a large account reads."""
        info = await self.call(
            "getAccountInfo",
            lambda c: c.get_account_info(address, encoding="base64",
                                         data_slice=DataSliceOpts(offset=offset, length=length)),
        )  # fmt: skip
        return None if info.value is None else (info.value.owner, bytes(info.value.data))

    async def multiple_accounts(
        self, addresses: Sequence[Pubkey]
    ) -> list[tuple[Pubkey, bytes] | None]:
        """Owner and data of each address (getMultipleAccounts, 100 a call), None where there is none."""
        out: list[tuple[Pubkey, bytes] | None] = []
        for start in range(0, len(addresses), 100):
            chunk = list(addresses[start : start + 100])
            response = await self.call(
                "getMultipleAccounts",
                lambda c, chunk=chunk: c.get_multiple_accounts(chunk, encoding="base64"),
            )
            if len(response.value) != len(chunk):
                raise RpcRefused(f"the RPC at {self.url} answered getMultipleAccounts with "
                                 f"{len(response.value)} accounts for {len(chunk)} addresses")  # fmt: skip
            out += [None if a is None else (a.owner, bytes(a.data)) for a in response.value]
        return out

    async def balance(self, address: Pubkey) -> int:
        return (await self.call("getBalance", lambda c: c.get_balance(address))).value

    async def rent_exempt(self, space: int) -> int:
        response = await self.call(
            "getMinimumBalanceForRentExemption",
            lambda c: c.get_minimum_balance_for_rent_exemption(space),
        )
        return response.value

    async def program_accounts(
        self, program: Pubkey, *, discriminator: bytes, size: int | None = None
    ) -> list[tuple[Pubkey, bytes]]:
        """Accounts of `program` whose data starts with `discriminator` (a memcmp filter, not a full scan)."""
        filters: list[Any] = [MemcmpOpts(offset=0, bytes=b58encode(discriminator))]
        if size is not None:
            filters.append(size)
        response = await self.call(
            "getProgramAccounts",
            lambda c: c.get_program_accounts(program, encoding="base64", filters=filters),
        )
        return [(keyed.pubkey, bytes(keyed.account.data)) for keyed in response.value]

    async def recent_logs(self, address: Pubkey, limit: int = 20) -> list[list[str]]:
        """Log lines of the latest successful transactions that touched `address`, newest first."""
        signatures = await self.call(
            "getSignaturesForAddress", lambda c: c.get_signatures_for_address(address, limit=limit)
        )
        wanted = [s.signature for s in signatures.value if s.err is None]
        return list(await asyncio.gather(*(self.transaction_logs(s) for s in wanted)))

    async def transaction_logs(self, signature: Signature) -> list[str]:
        """Log lines of one transaction (empty when the cluster no longer has it)."""
        tx = await self.call(
            "getTransaction",
            lambda c: c.get_transaction(signature, max_supported_transaction_version=0),
        )
        meta = tx.value.transaction.meta if tx.value is not None else None
        return list(meta.log_messages or []) if meta is not None else []

    async def unix_time(self) -> int:
        """The cluster's clock (the Clock sysvar's unix_timestamp)."""
        from solders.sysvar import CLOCK

        data = await self.account_data(CLOCK)
        if data is None:
            raise RpcUnavailable("the cluster has no Clock sysvar")
        return int.from_bytes(data[32:40], "little", signed=True)

    # -- transactions ---------------------------------------------------------------------------------
    async def send(
        self,
        instructions: Sequence[Instruction],
        payer: Keypair,
        signers: Sequence[Keypair] = (),
        *,
        confirm: bool = True,
    ) -> Signature:
        """Sign with the payer and `signers`, send with preflight, wait for confirmation.

        An identical transaction (same instructions, signers and blockhash) that already landed is not a
        success of this call: it is re-signed with the next blockhash, so the program really runs again.
        """
        unique = {bytes(k.pubkey()): k for k in [payer, *signers]}
        opts = TxOpts(skip_confirmation=True, preflight_commitment=self.commitment)
        used: set = set()
        for _ in range(_DUPLICATE_RETRIES):
            latest = await self.latest_blockhash(fresh=bool(used))
            blockhash = latest.value.blockhash
            if blockhash in used:
                await asyncio.sleep(0.1)
                continue
            used.add(blockhash)
            message = Message.new_with_blockhash(list(instructions), payer.pubkey(), blockhash)
            tx = Transaction(list(unique.values()), message, blockhash)
            raw, signature, attempts = bytes(tx), tx.signatures[0], 0

            async def submit(client: AsyncClient, raw: bytes = raw) -> bool:
                nonlocal attempts
                attempts += 1
                try:
                    await client.send_raw_transaction(raw, opts=opts)
                except RPCException as exc:
                    detail = exc.args[0] if exc.args else exc
                    if "AlreadyProcessed" in str(detail) or "already been processed" in str(detail):
                        return (
                            attempts > 1
                        )  # our own earlier attempt landed; else: an identical twin
                    if "BlockhashNotFound" in str(detail) and len(used) == 1:
                        self._blockhash = None  # a shared blockhash the cluster forgot: a fresh one
                        return False
                    raise self._rejection(detail) from None
                except RPCNoResultException as exc:
                    raise TransactionFailed(f"the cluster refused the transaction: {exc}") from None
                return True

            if await self.call("sendTransaction", submit):
                if confirm:
                    await self.confirm(signature, latest.value.last_valid_block_height)
                return signature
        raise TransactionFailed(
            "no fresh blockhash to send the transaction with; is the cluster producing blocks?"
        )

    async def latest_blockhash(self, *, fresh: bool = False) -> Any:
        """getLatestBlockhash, shared by the transactions sent within BLOCKHASH_REUSE seconds (a blockhash
        stays valid for about a minute; one per transaction would double a bulk send's requests)."""
        now = time.monotonic()
        if not fresh and self._blockhash is not None and now - self._blockhash[0] < BLOCKHASH_REUSE:
            return self._blockhash[1]
        latest = await self.call("getLatestBlockhash", lambda c: c.get_latest_blockhash())
        self._blockhash = (now, latest)
        return latest

    def _rejection(self, detail: Any) -> TransactionFailed:
        data = getattr(detail, "data", None)
        err = getattr(data, "err", None)
        logs = list(getattr(data, "logs", None) or [])
        if err is not None:
            return failure_from_logs(err, logs, self.idl)
        message = getattr(detail, "message", None) or str(detail)
        return failure_from_logs(message, logs, self.idl)

    async def confirm(self, signature: Signature, last_valid_block_height: int) -> None:
        """Poll the signature's status until it reaches our commitment or its blockhash expires."""
        deadline = time.monotonic() + self.confirm_timeout
        delay = 0.02
        while True:
            statuses = await self.call(
                "getSignatureStatuses", lambda c: c.get_signature_statuses([signature])
            )
            status = statuses.value[0]
            if status is not None:
                if status.err is not None:
                    raise failure_from_logs(status.err, [], self.idl)
                if status.confirmation_status is not None and int(
                    status.confirmation_status
                ) >= int(_commitment_level(self.commitment)):
                    return
            if time.monotonic() > deadline:
                raise TransactionFailed(
                    f"transaction {signature} not confirmed in {self.confirm_timeout:.0f} s"
                )
            height = (await self.call("getBlockHeight", lambda c: c.get_block_height())).value
            if height > last_valid_block_height:
                raise TransactionFailed(f"transaction {signature} expired before it was confirmed")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def airdrop(self, address: Pubkey, lamports: int) -> Signature:
        async def request(client: AsyncClient) -> Signature:
            try:
                return (await client.request_airdrop(address, lamports)).value
            except RPCException as exc:
                detail = exc.args[0] if exc.args else exc
                message = getattr(detail, "message", None) or str(detail)
                raise TransactionFailed(f"airdrop refused: {message}") from None

        signature = await self.call("requestAirdrop", request)
        latest = await self.call("getLatestBlockhash", lambda c: c.get_latest_blockhash())
        await self.confirm(signature, latest.value.last_valid_block_height)
        return signature

    async def raw_request(self, method: str, params: list[Any]) -> Any:
        """A JSON-RPC call solana-py does not know (e.g. the localnet's `localnet_warpTime`)."""

        async def request(client: AsyncClient) -> Any:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            return _json_rpc_result(
                await _post(client, body), method, client._provider.endpoint_uri
            )

        return await self.call(method, request)

    async def raw_batch(self, method: str, params: Sequence[list[Any]]) -> list[Any]:
        """Several calls of `method` in one JSON-RPC batch; results in the order of `params`."""

        async def request(client: AsyncClient) -> list[Any]:
            body = [
                {"jsonrpc": "2.0", "id": i, "method": method, "params": p}
                for i, p in enumerate(params)
            ]
            payload = await _post(client, body)
            uri = client._provider.endpoint_uri
            if not isinstance(payload, list) or len(payload) != len(body):
                raise RpcRefused(f"the RPC at {uri} answered a {method} batch with something that is not "
                                 "a JSON-RPC batch response")  # fmt: skip
            by_id = {item.get("id"): item for item in payload if isinstance(item, dict)}
            if set(by_id) != set(range(len(body))):
                raise RpcRefused(f"the RPC at {uri} answered a {method} batch with the wrong ids")
            return [_json_rpc_result(by_id[i], method, uri) for i in range(len(body))]

        return await self.call(method, request)


async def _post(client: AsyncClient, body: Any) -> Any:
    """POST a JSON-RPC body to the client's URL: the decoded JSON answer, None when it is not JSON."""
    response = await client._provider.session.post(client._provider.endpoint_uri, json=body)
    response.raise_for_status()
    try:
        return response.json()
    except ValueError:
        return None


def _json_rpc_result(payload: Any, method: str, uri: str) -> Any:
    """The result of one JSON-RPC response; an error answer or a non-JSON-RPC one is one clear error."""
    if not isinstance(payload, dict) or not ("result" in payload or "error" in payload):
        raise RpcRefused(
            f"the RPC at {uri} answered {method} with something that is not a JSON-RPC response"
        )
    if "error" in payload:
        error = payload["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise TransactionFailed(f"{method}: {message}")
    return payload["result"]


MAX_PACKET = 1232  # bytes of one serialized transaction


def transaction_size(instructions: Sequence[Instruction], payer: Pubkey) -> int:
    """Bytes of the signed legacy transaction these instructions make (signatures included)."""
    from solders.hash import Hash

    message = Message.new_with_blockhash(list(instructions), payer, Hash.default())
    signatures = [Signature.default()] * message.header.num_required_signatures
    return len(bytes(Transaction.populate(message, signatures)))


def pack_instructions(
    instructions: Sequence[Instruction], payer: Pubkey
) -> list[list[Instruction]]:
    """Consecutive instructions grouped into as few transactions as fit one packet each, order kept."""
    groups: list[list[Instruction]] = []
    for ix in instructions:
        if groups and transaction_size([*groups[-1], ix], payer) <= MAX_PACKET:
            groups[-1].append(ix)
        else:
            groups.append([ix])
    return groups


def _commitment_level(commitment: Commitment):
    return _COMMITMENT_TO_SOLDERS[commitment]
