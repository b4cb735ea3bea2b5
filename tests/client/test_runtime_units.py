"""The client's pure parts: gossip bodies and node addresses decoded strictly, the consensus a quorum of
witnesses decides, drift detection. The Run stand-ins carry only the fields these functions read."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cohort.client.p2p import NodeKey, PeerAddress
from cohort.client.runtime.messages import Finished, MessageError, Ready, Result, decode_message
from cohort.client.runtime.peers import ENDPOINT_CAPACITY, decode_endpoint, encode_endpoint
from cohort.client.runtime.rounds import (
    RoundView,
    StepBook,
    WitnessProof,
    consensus,
    drifted,
    participants_and_bloom,
)
from cohort.sdk.coordinator_core import CoordinatorCore


@pytest.fixture(scope="module")
def core() -> CoordinatorCore:
    return CoordinatorCore()


def test_messages_round_trip_and_anything_else_is_refused():
    for message in (Ready(3), Finished(17), Result(17, 8, 16, b"c" * 32, 31_184)):
        assert decode_message(message.encode()) == message
    good = Result(1, 0, 8, b"c" * 32, 100).encode()
    for body, why in [
        (b"", "empty"), (b"\x09" + good[1:], "unknown message kind 9"), (good[:-1], "is 61 bytes, got 60"),
        (good + b"\0", "got 62"), (Result(1, 8, 8, b"c" * 32, 100).encode(), "is empty"),
        (Result(1, 0, 8, b"c" * 32, 0).encode(), "size 0"), (Result(1, 0, 8, b"c" * 32, 2**31).encode(), "out of range"),
    ]:  # fmt: skip
        with pytest.raises(MessageError, match=why):
            decode_message(body)


def test_endpoints_round_trip_and_keep_the_relay_when_cut():
    node = NodeKey.generate().node_id
    address = PeerAddress(node, ("127.0.0.1:4000", "[::1]:4001"), "https://relay.example")
    text = encode_endpoint(address)
    assert text == "127.0.0.1:4000 [::1]:4001 relay=https://relay.example"
    assert decode_endpoint(node, text) == address
    many = PeerAddress(node, tuple(f"10.0.0.{i}:40000" for i in range(20)), "https://relay.example")
    cut = encode_endpoint(many)
    assert len(cut) <= ENDPOINT_CAPACITY and cut.endswith("relay=https://relay.example")
    assert decode_endpoint(node, cut).addrs == many.addrs[: len(decode_endpoint(node, cut).addrs)]
    for bad in ["127.0.0.1", "host:port", "1.2.3.4:99999", "relay=ftp://x", "relay=https://a relay=https://b",
                "a\x01:1", "x" * (ENDPOINT_CAPACITY + 1)]:  # fmt: skip
        with pytest.raises(ValueError):
            decode_endpoint(node, bad)


def _run(clients: int, witness_nodes: int):
    return SimpleNamespace(clients=[None] * clients, config=SimpleNamespace(witness_nodes=witness_nodes))


def test_consensus_takes_what_a_quorum_attested_and_names_what_we_lack(core: CoordinatorCore):
    honest = StepBook(5, results={0: (b"\x10" * 32, b"p0"), 1: (b"\x11" * 32, b"p1"), 2: (b"\x12" * 32, b"p2")})
    proofs = []
    for index in (0, 1, 2):  # three witnesses (quorum 2); the third did not get client 2's result
        seen = StepBook(5, results={k: v for k, v in honest.results.items() if index < 2 or k != 2})
        participants, salt, bloom = participants_and_bloom(core, seen)
        proofs.append(WitnessProof(index, index, participants, salt, bloom))
    view = RoundView(6, 6, 0, b"", b"\xff" * 32, tuple(proofs))
    decided = consensus(core, _run(4, 3), view, honest)
    assert decided.accepted == {0: b"p0", 1: b"p1", 2: b"p2"} and decided.missing == ()
    # a replica that holds another commitment for client 1, and nothing from client 2, must not apply
    mine = StepBook(5, results={0: honest.results[0], 1: (b"\x99" * 32, b"forged")})
    decided = consensus(core, _run(4, 3), view, mine)
    assert decided.accepted == {0: b"p0"} and decided.missing == (1, 2)
    # a result only one witness saw is not part of the consensus (client 3 never trained)
    assert 3 not in decided.missing


def test_drift_is_a_committed_checkpoint_that_is_not_ours():
    def run(step: int, digest: bytes):
        return SimpleNamespace(model=SimpleNamespace(checkpoint=SimpleNamespace(step=step, weights_sha256=digest)))

    ours = b"\x01" * 32
    assert not drifted(run(10, ours), 10, ours)
    assert drifted(run(10, b"\x02" * 32), 10, ours)
    assert not drifted(run(9, b"\x02" * 32), 10, ours)  # a pointer from another epoch end
    assert not drifted(run(10, bytes(32)), 10, ours)  # nothing committed
    assert not drifted(run(10, b"\x02" * 32), None, None)  # we saved nothing


def test_a_witness_attests_only_results_of_the_batch_the_chain_gave(core: CoordinatorCore):
    book = StepBook(5, results={0: (b"\x10" * 32, b"p0"), 1: (b"\x11" * 32, b"p1")},
                    batches={0: (0, 8), 1: (100, 108)})  # fmt: skip
    participants, salt, bloom = participants_and_bloom(core, book, {0: (0, 8), 1: (8, 16)})
    assert participants[0] == 0b01  # client 1 trained another batch than its own: not attested
    assert core.bloom_contains(bloom, salt, b"\x10" * 32) and not core.bloom_contains(bloom, salt, b"\x11" * 32)
