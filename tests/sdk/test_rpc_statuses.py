"""Whatever an RPC endpoint answers — any HTTP status, a JSON-RPC error, an HTML page — a command prints one
line naming the URL and what came back, never a traceback; a working fallback URL is still used."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

STATUSES = [
    (401, "HTTP 401 Unauthorized", "API key"),
    (403, "HTTP 403 Forbidden", "refused access"),
    (404, "HTTP 404 Not Found", "check the URL"),
    (405, "HTTP 405 Method Not Allowed", "check the URL"),
    (410, "HTTP 410 Gone", ""),
    (418, "HTTP 418", ""),
]


def always(status: int, body: str = "no", content_type: str = "text/plain"):
    return lambda method, n: web.Response(status=status, text=body, content_type=content_type)


@pytest.mark.parametrize(("status", "text", "hint"), STATUSES, ids=[str(s[0]) for s in STATUSES])
def test_http_status_is_one_line(workspace, helpers, rpc_proxy, status, text, hint):
    proxy = rpc_proxy(always(status))
    program = ("--program-id", str(workspace.program_id))
    for command in (("wallet", "balance"), ("run", "status", "example-kjv", *program),
                    ("run", "list", *program), ("deploy", "--no-build")):  # fmt: skip
        line = helpers.one_error_line(workspace.cli(*command, "--cluster", proxy.url))
        assert f"the RPC at {proxy.url} answered" in line and text in line, line
        assert hint in line, line
    assert len(proxy.seen) == 4  # a refusal is not retried against the same URL


def test_server_errors_are_retried_then_one_line(workspace, helpers, rpc_proxy):
    proxy = rpc_proxy(always(502))
    line = helpers.one_error_line(workspace.cli("wallet", "balance", "--cluster", proxy.url))
    assert f"cannot reach the RPC at {proxy.url}" in line and "HTTP 502 Bad Gateway" in line
    assert len(proxy.seen) == 3  # the retries


def test_an_html_page_or_a_json_rpc_error_is_one_line(workspace, helpers, rpc_proxy):
    page = rpc_proxy(always(200, "<html>captive portal</html>", "text/html"))
    line = helpers.one_error_line(workspace.cli("wallet", "balance", "--cluster", page.url))
    assert "not a JSON-RPC response" in line and page.url in line
    error = json.dumps({"jsonrpc": "2.0", "id": 0,
                        "error": {"code": -32601, "message": "Method not found"}})  # fmt: skip
    refusing = rpc_proxy(always(200, error, "application/json"))
    line = helpers.one_error_line(workspace.cli("wallet", "balance", "--cluster", refusing.url))
    assert "JSON-RPC error: Method not found" in line and refusing.url in line


def test_a_refusing_url_falls_back_to_the_next(workspace, rpc_proxy):
    proxy = rpc_proxy(always(403))
    urls = f"{proxy.url},{workspace.localnet.net.http_url}"
    result = workspace.cli("wallet", "balance", "--cluster", urls)
    assert result.exit_code == 0 and "SOL" in result.output, result.output
