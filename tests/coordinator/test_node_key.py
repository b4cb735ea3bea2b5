"""join_run binds a node id to its key: an Ed25519 instruction earlier in the same transaction must show
the node key signing (run, wallet, join marker), so a proof is good for one joining window. Also: one node
id per wallet, the endpoint's encoding and its Endpoint account, no-op re-joins."""

from __future__ import annotations

import struct

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction
from solders.transaction_metadata import FailedTransactionMetadata
from support.coordinator_chain import make_config, open_run

from cohort.sdk.statements import (
    ED25519_PROGRAM,
    decode_endpoint,
    ed25519_instruction,
    encode_endpoint,
    join_proof_message,
)


def join_ix(chain, wallet, run, identity, endpoint=b""):
    args = {"p2p_identity": identity, "endpoint": endpoint, "throughput": 0}
    return chain.call_ix("join_run", wallet, run, args, authorization=run)


def test_the_encoder_passes_the_native_program_and_a_bad_signature_does_not(chain):
    key = Keypair.from_seed(bytes(range(32)))
    good = ed25519_instruction(key, b"any message")
    assert good.program_id == ED25519_PROGRAM
    chain.send([good])
    data = bytearray(good.data)
    data[48] ^= 1  # the signature's first byte
    tx = Transaction([chain.payer], Message([Instruction(ED25519_PROGRAM, bytes(data), [])],
                     chain.payer.pubkey()), chain.svm.latest_blockhash())  # fmt: skip
    assert isinstance(chain.svm.send_transaction(tx), FailedTransactionMetadata)


def marker(chain, run) -> int:
    return chain.state(run)["next_active"]


def test_a_join_without_the_node_keys_signature_is_refused(chain):
    _, run = open_run(chain, make_config(2))
    wallet, node = chain.wallet(), Keypair()
    message = join_proof_message(chain.idl, run, wallet.pubkey(), marker(chain, run))
    ix = join_ix(chain, wallet, run, node.pubkey())
    assert chain.send_fails([ix], [wallet], run).name == "NodeKeyNotProven"
    # signed by another key, over another wallet or another run, or placed after the join
    other = Keypair()
    attempts = [
        [ed25519_instruction(other, message), ix],
        [
            ed25519_instruction(
                node, join_proof_message(chain.idl, run, other.pubkey(), marker(chain, run))
            ),
            ix,
        ],
        [
            ed25519_instruction(
                node,
                join_proof_message(chain.idl, other.pubkey(), wallet.pubkey(), marker(chain, run)),
            ),
            ix,
        ],
        [
            ed25519_instruction(
                node, join_proof_message(chain.idl, run, wallet.pubkey(), marker(chain, run) + 1)
            ),
            ix,
        ],
        [ed25519_instruction(node, message[:-1]), ix],
        [ix, ed25519_instruction(node, message)],
    ]
    for instructions in attempts:
        assert chain.send_fails(instructions, [wallet], run).name == "NodeKeyNotProven"
    chain.send([ed25519_instruction(node, message), ix], [wallet])
    assert chain.state(run)["registry"][0]["p2p_identity"] == node.pubkey()


def test_offsets_that_point_into_another_instruction_prove_nothing(chain):
    """The attacker's own key signs the message in instruction 1; instruction 0 holds the victim's key and
    the message in its data but tells the native program to check instruction 1's bytes. A checker that
    reads instruction 0's data at its offsets would see the victim's key there."""
    _, run = open_run(chain, make_config(2))
    wallet, attacker, victim = chain.wallet(), Keypair(), Keypair()
    message = join_proof_message(chain.idl, run, wallet.pubkey(), marker(chain, run))
    honest = ed25519_instruction(attacker, message)  # 16: key, 48: signature, 112: message
    offsets = struct.pack("<7H", 48, 1, 16, 1, 112, len(message), 1)
    decoy = bytes([1, 0]) + offsets + bytes(victim.pubkey()) + bytes(64) + message
    pointing = Instruction(ED25519_PROGRAM, decoy, [])
    chain.send([pointing, honest])  # the native program accepts it: it checked instruction 1
    ix = join_ix(chain, wallet, run, victim.pubkey())
    assert chain.send_fails([pointing, honest, ix], [wallet], run).name == "NodeKeyNotProven"
    # the key that really signed may join with it
    chain.send([pointing, honest, join_ix(chain, wallet, run, attacker.pubkey())], [wallet])


def test_an_identity_another_wallet_holds_is_refused(chain):
    _, run = open_run(chain, make_config(3))
    a, b = chain.wallet(), chain.wallet()
    node = Keypair()
    chain.join(a, run, node)
    assert chain.join_fails(b, run, node) == "IdentityTaken"
    chain.join(b, run)  # its own node key is fine


def test_rejoining_with_the_same_identity_is_a_refused_no_op_unless_the_address_changed(chain):
    _, run = open_run(chain, make_config(3))
    wallet, node = chain.wallet(), Keypair()
    chain.join(wallet, run, node, endpoint=b"10.0.0.1:4433")
    assert (
        chain.join_fails(wallet, run, node, endpoint=b"10.0.0.1:4433") == "AlreadyJoined"
    )  # bytes unchanged
    before = chain.run_bytes(run)
    chain.join(wallet, run, node, endpoint=b"10.0.0.2:4433")  # a restarted client on another port
    assert (
        chain.run_bytes(run) == before
    )  # the Run is untouched (no nonce bump): only the address moved
    endpoint = chain.idl.decode_account(
        "Endpoint", chain.account_bytes(chain.endpoint_address(run, wallet.pubkey()))
    )
    assert endpoint["endpoint"].rstrip(b"\0") == b"10.0.0.2:4433"


def test_a_join_proof_is_good_for_one_joining_window(chain):
    """The proof names the join marker (next_active): once the window it was made for closed (the epoch's
    first round consumed its joins), the same signed proof no longer joins anyone."""
    config = make_config(2)
    _, run = open_run(chain, config)
    wallet, other, node = chain.wallet(), chain.wallet(), Keypair()
    old = marker(chain, run)
    proof = ed25519_instruction(node, join_proof_message(chain.idl, run, wallet.pubkey(), old))
    chain.send([proof, join_ix(chain, wallet, run, node.pubkey())], [wallet])
    chain.join(other, run)
    start_epoch_of_two(chain, run, [wallet, other], config)
    assert marker(chain, run) == old + 1
    replay = [proof, join_ix(chain, wallet, run, node.pubkey())]
    assert chain.send_fails(replay, [wallet], run).name == "NodeKeyNotProven"
    chain.join(wallet, run, node)  # a proof for this window
    assert chain.state(run)["registry"][0]["join_marker"] == old + 1


def start_epoch_of_two(chain, run, members, config) -> None:
    chain.advance(config["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    chain.call("warmup_witness", members[0], run, {"index": 0})  # witness_nodes 1
    chain.next_slot()
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "RoundTrain"


def endpoint_of(chain, run, wallet) -> dict | None:
    data = chain.account_bytes(chain.endpoint_address(run, wallet.pubkey()))
    return None if not data else chain.idl.decode_account("Endpoint", data)


def test_the_endpoint_goes_to_the_wallets_endpoint_account_and_must_be_canonical(chain):
    """join_run writes PDA ["endpoint", run, wallet] (peers read every member's with one
    getMultipleAccounts), a later join rewrites it, exit_run closes it and refunds its rent; the Run
    account never holds it. ClientJoined still carries it for indexers."""
    _, run = open_run(chain, make_config(3))
    wallet, node = chain.wallet(), Keypair()
    for bad in (b"127.0.0.1\n", b"caf\xc3\xa9", b"a\0b", b"\x7f"):
        assert chain.join_fails(wallet, run, node, endpoint=bad) == "EndpointInvalid"
    before = chain.run_bytes(run)
    address = "x" * chain.idl.constants["ENDPOINT_LEN"]
    result = chain.join(wallet, run, node, endpoint=address.encode())
    (event,) = [
        e
        for name, e in chain.idl.events_in_logs(list(result.logs()), chain.program_id)
        if name == "ClientJoined"
    ]
    assert event["p2p_identity"] == node.pubkey() and decode_endpoint(event["endpoint"]) == address
    assert address.encode() not in chain.run_bytes(run) and len(chain.run_bytes(run)) == len(before)
    bump = Pubkey.find_program_address(
        [b"endpoint", bytes(run), bytes(wallet.pubkey())], chain.program_id
    )[1]
    assert endpoint_of(chain, run, wallet) == {
        "bump": bump, "_pad": bytes(7), "run": run, "wallet": wallet.pubkey(), "p2p_identity": node.pubkey(),
        "join_marker": marker(chain, run), "endpoint": address.encode(),
    }  # fmt: skip

    # a new identity and address: the same account, rewritten
    other = Keypair()
    chain.join(wallet, run, other, endpoint=b"10.0.0.2:4433")
    record = endpoint_of(chain, run, wallet)
    assert (
        record["p2p_identity"] == other.pubkey()
        and decode_endpoint(record["endpoint"]) == "10.0.0.2:4433"
    )

    # only this wallet's own PDA: another wallet's account, or any other address, is refused
    stranger, key = chain.wallet(), Keypair()
    proof = chain.join_ixs(stranger, run, key)[0]
    for account in (chain.endpoint_address(run, wallet.pubkey()), Keypair().pubkey()):
        args = {"p2p_identity": key.pubkey(), "endpoint": b"", "throughput": 0}
        join = chain.call_ix("join_run", stranger, run, args, authorization=run, endpoint=account)
        assert chain.send_fails([proof, join], [stranger], run).name == "WrongPda"

    # exit closes it; the rent goes back to the wallet
    rent = chain.svm.get_balance(chain.endpoint_address(run, wallet.pubkey()))
    balance = chain.svm.get_balance(wallet.pubkey())
    chain.call("exit_run", wallet, run)
    assert endpoint_of(chain, run, wallet) is None
    assert (
        chain.svm.get_balance(wallet.pubkey()) == balance + rent
    )  # the harness payer pays the fees


def test_exit_run_closes_only_the_wallets_own_endpoint(chain):
    """An empty account passed as the Endpoint must be at the wallet's Endpoint address: otherwise exit_run
    would leave the real one (and its rent, and its stale address for peers) behind."""
    _, run = open_run(chain, make_config(3))
    wallet = chain.wallet()
    chain.join(wallet, run, Keypair(), endpoint=b"10.0.0.1:4433")
    for empty in (Keypair().pubkey(), chain.endpoint_address(run, chain.wallet().pubkey())):
        assert chain.fails("exit_run", wallet, run, endpoint=empty) == "WrongPda"
    assert endpoint_of(chain, run, wallet) is not None
    chain.call("exit_run", wallet, run)
    assert endpoint_of(chain, run, wallet) is None


def test_endpoints_are_closed_by_their_wallets_after_the_run(chain):
    """close_run leaves every member's Endpoint behind: its wallet closes it (rent back) once the run is
    closed, or once the run no longer registers the wallet; nobody else can, and not while registered."""
    authority, run = open_run(chain, make_config(3))
    wallets = [chain.wallet() for _ in range(2)]
    for wallet in wallets:
        chain.join(wallet, run, Keypair(), endpoint=b"10.0.0.1:4433")
    own = chain.endpoint_address(run, wallets[0].pubkey())
    assert (
        chain.fails("close_endpoint", wallets[0], run) == "RunStillOpen"
    )  # exit_run is the way out
    chain.call("set_paused", authority, run, {"paused": True})
    close = {"run_index": chain.run_index_address(b"test-run"), "recipient": authority.pubkey()}
    chain.call("close_run", authority, run, **close)
    assert chain.account_bytes(run) is None
    stranger = chain.wallet()
    ix = chain.call_ix("close_endpoint", stranger, run, endpoint=own)
    assert chain.send_fails([ix], [stranger], own).name == "WrongPda"
    for wallet in wallets:
        address = chain.endpoint_address(run, wallet.pubkey())
        rent, balance = chain.svm.get_balance(address), chain.svm.get_balance(wallet.pubkey())
        assert rent > 0
        chain.call("close_endpoint", wallet, run)
        assert chain.account_bytes(address) is None
        assert chain.svm.get_balance(wallet.pubkey()) == balance + rent
    assert (
        chain.fails("close_endpoint", wallets[0], run) == "WrongAccountOwner"
    )  # nothing left to close


def test_the_sdk_refuses_an_endpoint_that_does_not_fit():
    assert encode_endpoint("127.0.0.1:1", 16) == b"127.0.0.1:1" + bytes(5)
    for bad, why in (
        ("x" * 17, "at most 16"),
        ("é", "printable ASCII"),
        ("a\nb", "printable ASCII"),
    ):
        try:
            encode_endpoint(bad, 16)
        except ValueError as e:
            assert why in str(e)
        else:
            raise AssertionError(f"{bad!r} accepted")
