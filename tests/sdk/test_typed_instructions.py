"""The generated typed instructions (cohort.sdk.abi.coordinator) are the IDL's: the same accounts with the same
flags for every instruction, and the same bytes as the IDL coder for the arguments the SDK sends."""

from __future__ import annotations

import dataclasses

import pytest
from solders.pubkey import Pubkey

from cohort.sdk.abi import coordinator as abi
from cohort.sdk.client import witness_args
from cohort.sdk.coordinator_core import load_idl
from cohort.sdk.idl import IdlError

IDL = load_idl()
PROGRAM = Pubkey.new_unique()


def camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


@pytest.mark.parametrize("name", list(IDL.instructions))
def test_every_instruction_names_the_idls_accounts(name: str):
    accounts_type = getattr(abi, f"{camel(name)}Accounts")
    given = {f.name: Pubkey.new_unique() for f in dataclasses.fields(accounts_type)
             if f.default is dataclasses.MISSING}  # fmt: skip
    metas = accounts_type(**given).metas()
    wanted = IDL.instructions[name]["accounts"]
    assert [m.pubkey for m in metas] == [
        given.get(a["name"]) or Pubkey.from_string(a["address"]) for a in wanted
    ]
    assert [(m.is_signer, m.is_writable) for m in metas] == [
        (bool(a.get("signer")), bool(a.get("writable"))) for a in wanted
    ]


def same_as_idl(name: str, accounts: object, args: object, as_dict: dict) -> None:
    typed = getattr(abi, name)(PROGRAM, accounts, args)
    coded = IDL.instruction(name, {f.name: getattr(accounts, f.name) for f in dataclasses.fields(accounts)},
                            as_dict, program_id=PROGRAM)  # fmt: skip
    assert bytes(typed.data) == bytes(coded.data)
    assert typed.accounts == coded.accounts


def test_the_sdks_typed_arguments_encode_as_the_idl_coder_does():
    user, run = Pubkey.new_unique(), Pubkey.new_unique()
    metadata = {"loss": 2.5, "tokens_per_sec": 1.0, "bytes_sent": 1, "bytes_received": 2, "eval_loss": 2.0,
                "eval_tokens": 64}  # fmt: skip
    witness = {"step": 7, "index": 3, "position": 1, "participants": b"\x05" * 32, "results_root": b"\x03" * 32,
               "weights_digest": 9, "metadata": metadata}  # fmt: skip
    same_as_idl("witness", abi.WitnessAccounts(user=user, run=run), witness_args(witness), witness)
    vote = {"index": 2, "step": 40, "manifest": b"\x07" * 32}
    same_as_idl(
        "vote_weights",
        abi.VoteWeightsAccounts(user=user, run=run),
        abi.VoteWeightsArgs(**vote),
        vote,
    )
    check = {"step": 5, "trainer": 1, "reason": "PayloadMismatch"}
    same_as_idl(
        "report_check",
        abi.ReportCheckAccounts(user=user, run=run),
        abi.ReportCheckArgs(**check),
        check,
    )
    grant = {"grantee": Pubkey.new_unique(), "allowed": True}
    accounts = abi.SetJoinAuthorizationAccounts(
        join_authority=user, run=run, authorization=Pubkey.new_unique()
    )
    same_as_idl("set_join_authorization", accounts, abi.SetJoinAuthorizationArgs(**grant), grant)


def test_a_wrong_value_names_its_field():
    with pytest.raises(IdlError, match=r"VoteWeightsArgs\.index"):
        abi.VoteWeightsArgs(index=70_000, step=1, manifest=b"").encode()
    with pytest.raises(IdlError, match=r"ReportCheckArgs\.reason"):
        abi.ReportCheckArgs(step=1, trainer=0, reason="Bored").encode()
    with pytest.raises(IdlError, match="missing"):
        witness_args({"step": 1, "metadata": {"loss": 0.0, "tokens_per_sec": 0.0, "bytes_sent": 0,
                                              "bytes_received": 0, "eval_loss": 0.0, "eval_tokens": 0}})  # fmt: skip
