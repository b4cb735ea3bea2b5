"""Forged events on a real localnet: the event_forger program logs the exact bytes of a ClientJoined (and a
RunStateChanged) in transactions that list the run's account, alone and around a real coordinator
instruction. The wallets' Endpoint accounts (where peers read addresses) hold the real endpoints, and the
explorer's indexer stores none of the forged events."""

from __future__ import annotations

import base64
import json

from solders.keypair import Keypair
from support.event_forger import event_bytes, forge, forger_elf

from cohort.sdk.deploy import deploy_program
from cohort.sdk.explorer.indexer import Indexer
from cohort.sdk.explorer.store import Store
from cohort.sdk.statements import (
    decode_endpoint,
    ed25519_instruction,
    encode_endpoint,
    join_proof_message,
)

REAL, FORGED = "10.0.0.1:4433", "6.6.6.6:666"
STRANGERS = ("10.0.0.2:4433", "10.0.0.3:4433")


async def test_forged_events_change_no_endpoint_and_are_not_indexed(chain, tmp_path):
    deployed = await deploy_program(
        chain.rpc, chain.authority, forger_elf(), tmp_path / "forger.json"
    )
    forger = deployed.program_id
    await chain.create_run("forged")
    client, idl = chain.client, chain.core.idl
    run = await client.resolve("forged")
    member, *strangers = await chain.members(3)
    member_node = Keypair()
    await client.join_run(member, run, member_node, REAL)

    capacity = idl.constants["ENDPOINT_LEN"]
    fake_join = event_bytes(idl, "ClientJoined", {
        "run": run, "signer": member.pubkey(), "p2p_identity": member_node.pubkey(),
        "endpoint": encode_endpoint(FORGED, capacity)})  # fmt: skip
    fake_state = event_bytes(idl, "RunStateChanged", {
        "run": run, "from_state": "WaitingForMembers", "to_state": "Paused", "_pad": b"", "epoch": 99,
        "step": 99, "height": 0, "random_seed": 0, "timestamp": 0})  # fmt: skip

    marker = idl.decode_account("Run", (await client.fetch_run(run)).data)["next_active"]

    def real_join(wallet: Keypair, node: Keypair, endpoint: str) -> list:
        proof = ed25519_instruction(node, join_proof_message(idl, run, wallet.pubkey(), marker))
        return [proof, client.instruction(
            "join_run", {"user": wallet.pubkey(), "run": run, "authorization": run,
                         "endpoint": client.endpoint_address(run, wallet.pubkey())},
            {"p2p_identity": node.pubkey(), "endpoint": encode_endpoint(endpoint, capacity), "throughput": 0},
        )]  # fmt: skip

    # the forger alone, with the run's account writable (it is listed, not written)
    alone = await chain.rpc.send([forge(forger, fake_join, run)], strangers[0])
    # the forger before, then after, a stranger's own real join in the same transaction
    nodes = [Keypair(), Keypair()]
    before = await chain.rpc.send(
        [forge(forger, fake_join, run), *real_join(strangers[0], nodes[0], STRANGERS[0]),
         forge(forger, fake_state)], strangers[0])  # fmt: skip
    after = await chain.rpc.send(
        [*real_join(strangers[1], nodes[1], STRANGERS[1]), forge(forger, fake_join, run)],
        strangers[1],
    )
    # the forged bytes really are in the logs, where the old decoder believed them
    for signature in (alone, before, after):
        logs = await chain.rpc.transaction_logs(signature)
        assert "Program data: " + base64.b64encode(fake_join).decode() in logs

    stored = {}
    for wallet in (member, *strangers):
        record = idl.decode_account(
            "Endpoint", await chain.rpc.account_data(client.endpoint_address(run, wallet.pubkey()))
        )
        stored[record["p2p_identity"]] = decode_endpoint(record["endpoint"])
    assert stored == {
        member_node.pubkey(): REAL,
        nodes[0].pubkey(): STRANGERS[0],
        nodes[1].pubkey(): STRANGERS[1],
    }

    store = Store(tmp_path / "explorer.sqlite")
    try:
        assert await Indexer(store, chain.rpc, [chain.program_id], core=chain.core).catch_up() > 0
        events = store.all_events()
        # the forger alone is not a coordinator transaction: the indexer never even reads it
        assert not any(sig == str(alone) for sig, *_ in events)
        for sig in (before, after):  # only the real join of each mixed transaction
            assert [name for s, _, name, _, _ in events if s == str(sig)] == ["ClientJoined"]
        joins = [json.loads(data) for _, _, name, _, data in events if name == "ClientJoined"]
        assert sorted(j["endpoint"] for j in joins) == [REAL, *STRANGERS]
        assert not any(json.loads(data).get("epoch") == 99 for *_, data in events)
    finally:
        store.close()
