"""`cohort run authorize`: the join authority lets a wallet into an Authorized run, and revokes it."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.sdk.coordinator_core import load_idl


def authorization(ws, run_address: str, grantee: Pubkey) -> dict | None:
    address = Pubkey.find_program_address(
        [b"join", bytes(Pubkey.from_string(run_address)), bytes(grantee)], ws.program_id
    )[0]
    value = ws.localnet.rpc("getAccountInfo", str(address), {"encoding": "base64"})["value"]
    if value is None:
        return None
    return load_idl().decode_account("JoinAuthorization", base64.b64decode(value["data"][0]))


def test_authorize_and_revoke(workspace, helpers, tmp_path: Path):
    ws = workspace
    config = helpers.config_copy(
        tmp_path, "gated-run", **{'join_policy = "Open"': 'join_policy = "Authorized"'}
    )
    assert ws.cli("run", "create", str(config)).exit_code == 0
    run_address = json.loads(ws.cli("run", "status", "gated-run", "--json").output)["address"]
    grantee = Keypair().pubkey()
    assert authorization(ws, run_address, grantee) is None

    result = ws.cli("run", "authorize", "gated-run", str(grantee))
    assert result.exit_code == 0 and "authorized" in result.output, result.output
    assert authorization(ws, run_address, grantee)["allowed"] is True

    result = ws.cli("run", "authorize", "gated-run", str(grantee), "--revoke")
    assert result.exit_code == 0 and "revoked" in result.output, result.output
    assert authorization(ws, run_address, grantee)["allowed"] is False

    result = ws.cli("run", "authorize", "gated-run", str(grantee), "--close")
    assert result.exit_code == 0 and "closed" in result.output, result.output
    assert authorization(ws, run_address, grantee) is None


def test_authorize_bad_input_is_one_line(workspace, helpers):
    assert "not a base58 address" in helpers.one_error_line(
        workspace.cli("run", "authorize", "gated-run", "nope")
    )
    line = helpers.one_error_line(
        workspace.cli("run", "authorize", "no-such-run", str(Keypair().pubkey()))
    )
    assert "no-such-run" in line
