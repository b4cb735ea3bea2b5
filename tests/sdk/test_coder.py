"""The IDL coder: every IDL type round-trips (with small IDLs built here, since the coordinator's uses only
fixed layouts), errors are clear, and a real account written by the program decodes to what the host build
of the same C code sees in those bytes."""

from __future__ import annotations

import itertools
import math

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from support.scripted_run import funded_run

from cohort.sdk.idl import Idl, IdlError
from cohort.sdk.models import Run, RunState, to_idl
from cohort.sdk.predict import batches_of, elected_witnesses, forecast_tick
from cohort.sdk.run_config import load_run_file

ADDRESS = str(Keypair().pubkey())


def idl_with(types: list[dict], args: list[dict] | None = None) -> Idl:
    return Idl({
        "address": ADDRESS,
        "metadata": {"name": "t", "version": "0.1.0", "spec": "0.1.0"},
        "instructions": [{"name": "go", "discriminator": [1, 2, 3, 4, 5, 6, 7, 8],
                          "accounts": [{"name": "user", "signer": True, "writable": True},
                                       {"name": "system_program", "address": "11111111111111111111111111111111"}],
                          "args": args or []}],
        "accounts": [{"name": "Thing", "discriminator": [9] * 8}],
        "events": [{"name": "Happened", "discriminator": [7] * 8}],
        "errors": [{"code": 6000, "name": "Bad", "msg": "it went bad"}],
        "types": types,
    })  # fmt: skip


EVERYTHING = [
    {"name": "Shape", "type": {"kind": "enum", "variants": [
        {"name": "Empty"},
        {"name": "Circle", "fields": [{"name": "radius", "type": "f64"}]},
        {"name": "Pair", "fields": ["u8", "string"]}]}},
    {"name": "Thing", "type": {"kind": "struct", "fields": [
        {"name": "a", "type": "u8"}, {"name": "b", "type": "i8"}, {"name": "c", "type": "u16"},
        {"name": "d", "type": "i16"}, {"name": "e", "type": "u32"}, {"name": "f", "type": "i32"},
        {"name": "g", "type": "u64"}, {"name": "h", "type": "i64"}, {"name": "i", "type": "f32"},
        {"name": "j", "type": "f64"}, {"name": "k", "type": "bool"}, {"name": "l", "type": "pubkey"},
        {"name": "m", "type": "string"}, {"name": "n", "type": "bytes"},
        {"name": "o", "type": {"array": ["u16", 3]}}, {"name": "p", "type": {"array": ["u8", 4]}},
        {"name": "q", "type": {"vec": "string"}}, {"name": "r", "type": {"option": "u32"}},
        {"name": "s", "type": {"option": {"defined": {"name": "Shape"}}}},
        {"name": "t", "type": {"vec": {"defined": {"name": "Shape"}}}},
        {"name": "u", "type": {"array": [{"option": "bool"}, 2]}}]}},
    {"name": "Happened", "type": {"kind": "struct", "fields": [{"name": "what", "type": "string"}]}},
]  # fmt: skip

VALUE = {
    "a": 255, "b": -128, "c": 65535, "d": -32768, "e": 2**32 - 1, "f": -(2**31), "g": 2**64 - 1,
    "h": -(2**63), "i": 1.5, "j": math.pi, "k": True, "l": Pubkey.from_string(ADDRESS),
    "m": "héllo", "n": b"\x00\x01", "o": [1, 2, 3], "p": b"ab\x00\x00", "q": ["x", "", "yz"],
    "r": None, "s": {"Circle": {"radius": 2.5}},
    "t": ["Empty", {"Pair": {0: 7, 1: "seven"}}, {"Circle": {"radius": -1.0}}], "u": [None, False],
}  # fmt: skip


def test_every_type_round_trips():
    idl = idl_with(EVERYTHING)
    thing = {"defined": {"name": "Thing"}}
    encoded = idl.encode(thing, VALUE)
    decoded, end = idl.decode(thing, encoded)
    assert end == len(encoded) and decoded == VALUE
    assert idl.decode_account("Thing", b"\x09" * 8 + encoded) == VALUE
    assert idl.encode(thing, {**VALUE, "r": 7, "s": None}) != encoded
    assert idl.decode(thing, idl.encode(thing, {**VALUE, "r": 7}))[0]["r"] == 7
    assert idl.size_of(thing) is None and idl.size_of({"array": ["u16", 3]}) == 6
    assert idl.size_of({"defined": {"name": "Shape"}}) is None  # carries data


def test_instructions_events_and_errors():
    idl = idl_with(
        EVERYTHING, args=[{"name": "count", "type": "u16"}, {"name": "label", "type": "string"}]
    )
    user = Keypair().pubkey()
    ix = idl.instruction("go", {"user": user}, {"count": 3, "label": "hi"})
    assert bytes(ix.data) == bytes(range(1, 9)) + b"\x03\x00" + b"\x02\x00\x00\x00hi"
    assert [(m.pubkey, m.is_signer, m.is_writable) for m in ix.accounts] == [
        (user, True, True), (Pubkey.from_string("11111111111111111111111111111111"), False, False)
    ]  # fmt: skip
    event = b"\x07" * 8 + idl.encode("string", "done")
    import base64

    logs = [f"Program {ADDRESS} invoke [1]", "Program log: not an event",
            "Program data: " + base64.b64encode(event).decode(), "Program data: !!notbase64",
            "Program data: " + base64.b64encode(b"short").decode(), f"Program {ADDRESS} success"]  # fmt: skip
    assert idl.events_in_logs(logs, ADDRESS) == [("Happened", {"what": "done"})]
    assert idl.error(6000).name == "Bad" and idl.error(6001) is None


@pytest.mark.parametrize(
    ("type_", "value", "message"),
    [("u8", 256, "value"), ("u16", -1, "value"), ("u32", 1.5, "expected an integer"),
     ("bool", 1, "expected a bool"), ("pubkey", "nope", "not a base58 address"),
     ({"array": ["u8", 2]}, b"abc", "do not fit"), ({"array": ["u16", 2]}, [1], "expected 2 items"),
     ({"defined": {"name": "Shape"}}, "Square", "not one of Shape's variants"),
     ({"defined": {"name": "Happened"}}, {"what": "x", "extra": 1}, "unknown field")],
)  # fmt: skip
def test_bad_values_are_named(type_, value, message):
    with pytest.raises(IdlError, match=message):
        idl_with(EVERYTHING).encode(type_, value)


def test_truncated_data_is_an_idl_error():
    idl = idl_with(EVERYTHING)
    encoded = idl.encode({"defined": {"name": "Thing"}}, VALUE)
    with pytest.raises(IdlError):
        idl.decode({"defined": {"name": "Thing"}}, encoded[:-3])
    with pytest.raises(IdlError, match="not a Thing"):
        idl.decode_account("Thing", b"\x00" * 8 + encoded)


def test_a_reread_account_reuses_what_did_not_change_and_decodes_what_did():
    idl = idl_with([{"name": "Thing", "type": {"kind": "struct", "fields": [
        {"name": "small", "type": "u32"}, {"name": "big", "type": {"array": ["u64", 200]}}]}}])  # fmt: skip

    def account(value: dict) -> bytes:
        return bytes([9] * 8) + idl.encode({"defined": {"name": "Thing"}}, value)

    first = {"small": 1, "big": list(range(200))}
    a = idl.decode_account_reusing("Thing", account(first))
    assert a == first == idl.decode_account("Thing", account(first))
    b = idl.decode_account_reusing("Thing", account({**first, "small": 2}))
    assert (
        b == {**first, "small": 2} and b["big"] is a["big"]
    )  # 1,600 bytes unchanged: not decoded again
    changed = {"small": 2, "big": [7] * 200}
    assert idl.decode_account_reusing("Thing", account(changed)) == changed
    with pytest.raises(IdlError, match="ends inside big"):
        idl.decode_account_reusing("Thing", account(first)[:100])
    with pytest.raises(IdlError, match="not a Thing"):
        idl.decode_account_reusing("Thing", bytes(8) + account(first)[8:])


async def test_a_real_account_decodes_as_the_host_core_sees_it(workspace, helpers, core, tmp_path):
    run_file = load_run_file(helpers.config_copy(tmp_path, "decoded"), core)
    async with funded_run(workspace, core, run_file) as (rpc, client, members):
        for m in members:
            await client.join_run(m, "decoded", Keypair())
        await rpc.raw_request("localnet_warpTime", [run_file.config.waiting_for_members_extra_time])
        await client.tick(members[0], "decoded")
        by_signer = {m.pubkey(): m for m in members}
        run = await client.fetch_run("decoded")
        for c in run.clients[: run.config.witness_nodes]:
            await client.warmup_witness(by_signer[c.signer], "decoded", c.index)
        await client.start_pending_round(members[0], "decoded")
        run = await client.fetch_run("decoded")

        # the IDL view of the program's bytes
        assert run.state == RunState.RoundTrain and len(run.clients) == len(members)
        assert {c.signer for c in run.clients} == set(by_signer)
        assert (
            core.idl.encode({"defined": {"name": "Run"}}, core.idl.decode_account("Run", run.data))
            == run.data[8:]
        )
        assert core.idl.decode_account_reusing("Run", run.data) == core.idl.decode_account(
            "Run", run.data
        )
        assert len(run.data) - 8 == core.run_size  # the C struct's size
        # the host C core on the same bytes: its rules accept the decoded config, and its election and
        # data assignment agree with the decoded round
        assert (
            core.check_config(to_idl(run.config)) is None
            and core.check_model(to_idl(run.model)) is None
        )
        elected = elected_witnesses(core, run)
        assert len(elected) == run.config.witness_nodes
        intervals = sorted(i for m in members for i in batches_of(core, run, m.pubkey()))
        round_ = run.current_round
        assert (
            intervals[0][0] == round_.data_index
            and intervals[-1][1] == round_.data_index + round_.batch_size
        )
        assert all(a[1] == b[0] for a, b in itertools.pairwise(intervals))
        # seated witnesses submit one results root; the seats the program stored are the core's, and a
        # strict majority of them decides the step
        quorum = dict(list(elected.items())[: core.quorum(run.config.witness_nodes)])
        for index, position in quorum.items():
            args = {"step": run.progress.step, "index": index, "position": position,
                    "participants": round_.active_mask, "results_root": bytes([3]) * 32, "weights_digest": 9,
                    "metadata": {"loss": 2.5, "tokens_per_sec": 1.0, "bytes_sent": 1, "bytes_received": 2, "eval_loss": 2.0, "eval_tokens": 64}}  # fmt: skip
            await client.witness(by_signer[run.clients[index].signer], "decoded", args)
        run = await client.fetch_run("decoded")
        # the decision ended the round: its inputs froze, the next round waits for that slot's hash
        assert run.state == RunState.RoundWitness and run.seed_pending
        decided = run.rounds[0]
        assert dict(decided.witnesses) == quorum and decided.witnesses_len == len(quorum)
        assert decided.decided and decided.decided_root == bytes([3]) * 32
        assert (decided.weights_digest, decided.digest_votes) == (9, len(quorum))
        assert all(r.results_root == bytes([3]) * 32 and r.saw(r.index) for r in decided.records)
        # "what would a tick do now", asked of the host core, is what the chain then does
        forecast = forecast_tick(core, run, await rpc.unix_time())
        assert forecast.next_state == RunState.RoundTrain
        await client.start_pending_round(members[0], "decoded")
        after = await client.fetch_run("decoded")
        assert after.state == forecast.next_state and not after.seed_pending
        assert forecast_tick(core, after, await rpc.unix_time()).error == "NothingToTick"
        assert isinstance(Run.decode(after.address, after.data, core.idl), Run)
        # the witnesses changed since the first read, the member table did not: both come out right
        assert core.idl.decode_account_reusing("Run", after.data) == core.idl.decode_account(
            "Run", after.data
        )
