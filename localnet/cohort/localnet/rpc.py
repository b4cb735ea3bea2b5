"""JSON-RPC 2.0 over the method table: single requests and batches, every failure a standard error."""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any

from . import jsonio
from .errors import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RpcError
from .methods import CHEATS, method_table

if TYPE_CHECKING:
    from .node import Node

log = logging.getLogger("cohort.localnet.rpc")
MAX_BATCH = 1000
_FATAL = (KeyboardInterrupt, SystemExit, asyncio.CancelledError, GeneratorExit)


def dumps(obj: Any) -> bytes:
    return jsonio.dumps(obj)


def error_response(error: RpcError, request_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": error.to_json(), "id": request_id}


class Dispatcher:
    def __init__(self, node: Node, methods: dict | None = None, *, cheats: bool = False) -> None:
        self.node = node
        methods = method_table(cheats) if methods is None else methods
        self._sync = {name: h for name, h in methods.items() if not inspect.iscoroutinefunction(h)}
        self._async = {name: h for name, h in methods.items() if inspect.iscoroutinefunction(h)}

    async def handle_body(self, body: bytes) -> bytes:
        """One HTTP body in, one HTTP body out."""
        try:
            request = jsonio.loads(body)
        except (ValueError, UnicodeDecodeError):
            return dumps(error_response(RpcError(PARSE_ERROR, "Parse error")))
        self.node.sync()
        if isinstance(request, list):
            if not request:
                return dumps(
                    error_response(RpcError(INVALID_REQUEST, "Invalid request: empty batch"))
                )
            if len(request) > MAX_BATCH:
                message = f"Invalid request: batch of {len(request)} exceeds {MAX_BATCH} requests"
                return dumps(error_response(RpcError(INVALID_REQUEST, message)))
            return dumps(list(await asyncio.gather(*(self.handle(r) for r in request))))
        answer = dumps(await self.handle(request))
        traffic = getattr(self.node, "traffic", None)
        if (
            traffic is not None
            and isinstance(request, dict)
            and isinstance(request.get("method"), str)
        ):
            traffic.bytes_by_method[request["method"]] += len(answer)
        return answer

    async def handle(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            return error_response(
                RpcError(INVALID_REQUEST, "Invalid request: expected a JSON object")
            )
        request_id = request.get("id")
        method = request.get("method")
        if request.get("jsonrpc") != "2.0" or not isinstance(method, str):
            message = 'Invalid request: needs "jsonrpc": "2.0" and a string "method"'
            return error_response(RpcError(INVALID_REQUEST, message), request_id)
        traffic = getattr(self.node, "traffic", None)
        if traffic is not None:
            traffic.by_method[method] += 1
        try:
            handler = self._sync.get(method)
            if handler is not None:
                result = handler(self.node, request.get("params"))
            else:
                handler = self._async.get(method)
                if handler is None:
                    raise RpcError(METHOD_NOT_FOUND, _not_found(method))
                result = await handler(self.node, request.get("params"))
        except RpcError as exc:
            return error_response(exc, request_id)
        except BaseException as exc:  # LiteSVM's Rust panics arrive as BaseException
            if isinstance(exc, _FATAL):
                raise
            log.exception("internal error in %s", method)
            message = f"Internal error: {type(exc).__name__}: {exc}"
            return error_response(RpcError(INTERNAL_ERROR, message), request_id)
        return {"jsonrpc": "2.0", "result": result, "id": request_id}


def _not_found(method: str) -> str:
    if method in CHEATS:
        return f"Method not found: {method} is a test cheat; start the localnet with --cheats"
    return "Method not found"
