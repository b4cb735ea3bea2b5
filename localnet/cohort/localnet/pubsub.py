"""Websocket subscriptions: account, program, logs, signature, slot and root, with their unsubscribes.

Connections are anything with a non-blocking `send(text)`; the server gives each websocket a queue. The
bank calls in after each landed transaction (`on_transaction`) and each new slot (`on_slot`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from solders.account import Account
from solders.pubkey import Pubkey

from . import jsonio
from .config import DEFAULT_MAX_SUBSCRIPTIONS
from .encode_account import check_data_slice, check_encoding, encode_account
from .errors import RpcError, invalid_params
from .filters import AccountFilter, matches, parse_filters
from .params import Params, parse_pubkey, parse_signature

if TYPE_CHECKING:
    from .bank import Bank, Commit
    from .blocks import Block


class Connection(Protocol):
    def send(self, text: str) -> None: ...


@dataclass
class Subscription:
    id: int
    kind: str
    connection: Connection
    key: str | None = None  # account, program, signature, or the `mentions` address of logs
    encoding: str = "base64"
    data_slice: tuple[int, int] | None = None
    filters: list[AccountFilter] = field(default_factory=list)


def _notification(method: str, sub_id: int, result: Any) -> str:
    message = {
        "jsonrpc": "2.0",
        "method": method,
        "params": {"result": result, "subscription": sub_id},
    }
    return jsonio.dumps_text(message)


class PubSub:
    def __init__(self, bank: Bank, max_per_connection: int = DEFAULT_MAX_SUBSCRIPTIONS) -> None:
        self.bank = bank
        self.max_per_connection = max_per_connection
        self._next_id = 0
        self._subs: dict[int, Subscription] = {}
        self._per_connection: dict[Connection, int] = {}
        self._by_key: dict[str, dict[str, dict[int, Subscription]]] = {
            kind: {} for kind in ("account", "program", "signature", "logs")
        }
        self._all_logs: dict[int, Subscription] = {}
        self._slot: dict[int, Subscription] = {}
        self._root: dict[int, Subscription] = {}

    # --- subscribing ------------------------------------------------------------------------------------
    def subscribe(self, method: str, params: Any, connection: Connection) -> int:
        kind = SUBSCRIBE_METHODS[method]
        if self._per_connection.get(connection, 0) >= self.max_per_connection:
            raise RpcError(
                -32602,
                f"Too many subscriptions: {self.max_per_connection} are open on this connection;"
                " unsubscribe some first",
            )
        self._next_id += 1
        sub = Subscription(self._next_id, kind, connection)
        p = Params(params, 2)
        if kind == "account":
            sub.key = str(p.pubkey(0))
            self._account_config(sub, p.config(1, self.bank.slot))
        elif kind == "program":
            sub.key = str(p.pubkey(0, "a base58 program id"))
            config = p.config(1, self.bank.slot)
            self._account_config(sub, config)
            sub.filters = parse_filters(config.get("filters"))
        elif kind == "signature":
            sub.key = str(parse_signature(p.required(0, "a base58 transaction signature")))
            p.config(1, self.bank.slot)
        elif kind == "logs":
            which = p.required(0, '"all", "allWithVotes" or {"mentions": [address]}')
            if which in ("all", "allWithVotes"):
                sub.key = None
            elif (
                isinstance(which, dict)
                and isinstance(which.get("mentions"), list)
                and len(which["mentions"]) == 1
            ):
                sub.key = str(parse_pubkey(which["mentions"][0]))
            else:
                raise invalid_params(
                    'logsSubscribe takes "all", "allWithVotes" or {"mentions": [one address]}'
                )
            p.config(1, self.bank.slot)
        self._add(sub)
        if kind == "signature":
            record = self.bank.history.get(
                sub.key
            )  # already landed: tell at once, like validators do
            if record is not None:
                asyncio.get_running_loop().call_soon(
                    self._signature_done, sub, record.slot, record.err
                )
        return sub.id

    def _account_config(self, sub: Subscription, config: dict[str, Any]) -> None:
        sub.encoding = check_encoding(config.get("encoding", "base64"))
        sub.data_slice = check_data_slice(config.get("dataSlice"))

    def _add(self, sub: Subscription) -> None:
        self._subs[sub.id] = sub
        self._per_connection[sub.connection] = self._per_connection.get(sub.connection, 0) + 1
        if sub.kind == "slot":
            self._slot[sub.id] = sub
        elif sub.kind == "root":
            self._root[sub.id] = sub
        elif sub.kind == "logs" and sub.key is None:
            self._all_logs[sub.id] = sub
        else:
            self._by_key[sub.kind].setdefault(sub.key, {})[sub.id] = sub

    def unsubscribe(self, method: str, params: Any, connection: Connection) -> bool:
        kind = UNSUBSCRIBE_METHODS[method]
        sub_id = Params(params, 1).integer(0, "a subscription id")
        sub = self._subs.get(sub_id)
        if sub is None or sub.kind != kind or sub.connection is not connection:
            raise RpcError(-32602, "Invalid subscription id.")
        self._remove(sub)
        return True

    def _remove(self, sub: Subscription) -> None:
        if self._subs.pop(sub.id, None) is not None:
            left = self._per_connection[sub.connection] - 1
            if left:
                self._per_connection[sub.connection] = left
            else:
                del self._per_connection[sub.connection]
        for table in (self._slot, self._root, self._all_logs):
            table.pop(sub.id, None)
        if sub.kind in self._by_key:
            subs = self._by_key[sub.kind].get(sub.key)
            if subs is not None:
                subs.pop(sub.id, None)
                if not subs:
                    del self._by_key[sub.kind][sub.key]

    def drop_connection(self, connection: Connection) -> None:
        for sub in [s for s in self._subs.values() if s.connection is connection]:
            self._remove(sub)

    # --- notifying ----------------------------------------------------------------------------------------
    def _context(self, value: Any) -> dict[str, Any]:
        return {"context": {"slot": self.bank.slot}, "value": value}

    def _signature_done(self, sub: Subscription, slot: int, err: Any) -> None:
        if sub.id not in self._subs:
            return
        result = {"context": {"slot": slot}, "value": {"err": err}}
        sub.connection.send(_notification("signatureNotification", sub.id, result))
        self._remove(sub)  # one-shot

    def on_account(self, key: Pubkey, account: Account | None) -> None:
        text = str(key)
        for sub in list(self._by_key["account"].get(text, {}).values()):
            value = self._encode(sub, account)
            sub.connection.send(_notification("accountNotification", sub.id, self._context(value)))
        if account is None:
            return
        owned = self._by_key["program"].get(str(account.owner))
        if owned:
            data = bytes(account.data)
            for sub in list(owned.values()):
                if matches(sub.filters, data):
                    value = {"pubkey": text, "account": self._encode(sub, account)}
                    sub.connection.send(
                        _notification("programNotification", sub.id, self._context(value))
                    )

    def _encode(self, sub: Subscription, account: Account | None) -> dict[str, Any] | None:
        if account is None:  # closed: validators report an empty system account
            account = Account(0, b"", Pubkey.default(), False)
        return encode_account(account, sub.encoding, sub.data_slice, self.bank.get_account)

    def on_transaction(self, commit: Commit) -> None:
        if not self._subs:
            return
        record = commit.record
        for key, account in commit.accounts:
            self.on_account(key, account)
        if self._all_logs or self._by_key["logs"]:
            value = {
                "signature": record.signature,
                "err": record.err,
                "logs": record.meta["logMessages"],
            }
            result = {"context": {"slot": record.slot}, "value": value}
            targets = list(self._all_logs.values())
            for key in set(record.account_keys):
                targets.extend(self._by_key["logs"].get(key, {}).values())
            for sub in targets:
                sub.connection.send(_notification("logsNotification", sub.id, result))
        for sub in list(self._by_key["signature"].get(record.signature, {}).values()):
            self._signature_done(sub, record.slot, record.err)

    def on_slot(self, block: Block) -> None:
        for sub in list(self._slot.values()):
            result = {"parent": block.parent_slot, "root": block.slot, "slot": block.slot}
            sub.connection.send(_notification("slotNotification", sub.id, result))
        for sub in list(self._root.values()):
            sub.connection.send(_notification("rootNotification", sub.id, block.slot))


SUBSCRIBE_METHODS = {
    "accountSubscribe": "account",
    "programSubscribe": "program",
    "logsSubscribe": "logs",
    "signatureSubscribe": "signature",
    "slotSubscribe": "slot",
    "rootSubscribe": "root",
}
UNSUBSCRIBE_METHODS = {
    "accountUnsubscribe": "account",
    "programUnsubscribe": "program",
    "logsUnsubscribe": "logs",
    "signatureUnsubscribe": "signature",
    "slotUnsubscribe": "slot",
    "rootUnsubscribe": "root",
}
