"""Test support for the treasurer: the coordinator's LiteSVM chain with the treasurer deployed beside it,
the real SPL Token and Token-2022 programs LiteSVM ships, and mints and token accounts made with them."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from solders.transaction_metadata import TransactionMetadata

from cohort.sdk.idl import Idl
from cohort.sdk.treasurer import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID, Treasurer
from support.coordinator_chain import Chain, ProgramFailed

TOKEN_PROGRAMS = {"spl-token": TOKEN_PROGRAM_ID, "token-2022": TOKEN_2022_PROGRAM_ID}
MINT_LEN, ACCOUNT_LEN = 82, 165


class TreasurerChain:
    """The coordinator chain plus the treasurer program, its SDK builders, and one token program's mints."""

    def __init__(self, chain: Chain, elf: bytes, idl: Idl, token_program: Pubkey) -> None:
        self.chain, self.svm = chain, chain.svm
        self.program_id = Keypair().pubkey()
        self.svm.add_program(self.program_id, elf)
        self.treasurer = Treasurer(self.program_id, chain.program_id, idl)
        self.idl = idl
        self.token_program = token_program
        self.cu: dict[str, int] = {}  # instruction name → the most CU one of its sends consumed

    # -- sending ----------------------------------------------------------------------------------------
    def send(self, instructions: Sequence[Instruction], signers: Sequence[Keypair] = (),
             measure: str | None = None) -> TransactionMetadata:  # fmt: skip
        """Send; treasurer errors are named from the treasurer's IDL. `measure` records the CU of a
        transaction holding that one treasurer instruction."""
        try:
            result = self.chain.send(instructions, signers)
        except ProgramFailed as e:
            if e.code is not None and any(
                f"Program {self.program_id} failed" in line for line in e.logs
            ):
                known = self.idl.error(e.code)
                e.name = known.name if known else None
            raise
        if measure:
            self.cu[measure] = max(self.cu.get(measure, 0), result.compute_units_consumed())
        return result

    def fails(self, instructions: Sequence[Instruction], signers: Sequence[Keypair] = (),
              watch: Sequence[Pubkey] = ()) -> str:  # fmt: skip
        """Expect a treasurer error (its IDL name); the watched accounts must be unchanged."""
        before = [self.chain.account_bytes(a) for a in watch]
        with pytest.raises(ProgramFailed) as e:
            self.send(instructions, signers)
        assert [self.chain.account_bytes(a) for a in watch] == before, (
            "a failed instruction changed an account"
        )
        return e.value.name or str(e.value.err)

    # -- tokens -----------------------------------------------------------------------------------------
    def _new_account(self, space: int, owner: Pubkey, signer: Keypair) -> Instruction:
        lamports = self.svm.minimum_balance_for_rent_exemption(space)
        return create_account(CreateAccountParams(from_pubkey=self.chain.payer.pubkey(), to_pubkey=signer.pubkey(),
                                                  lamports=lamports, space=space, owner=owner))  # fmt: skip

    def create_mint(
        self, decimals: int = 6, permanent_delegate: Pubkey | None = None
    ) -> tuple[Pubkey, Keypair]:
        """A mint of this chain's token program (InitializeMint2); with a permanent delegate (Token-2022's
        PermanentDelegate extension, initialized before the mint). Returns (mint, mint authority)."""
        mint, authority = Keypair(), Keypair()
        ixs = []
        if permanent_delegate is None:
            ixs.append(self._new_account(MINT_LEN, self.token_program, mint))
        else:  # base padded to 165 + account type + TLV header (4) + delegate (32)
            ixs.append(self._new_account(ACCOUNT_LEN + 1 + 4 + 32, self.token_program, mint))
            ixs.append(Instruction(self.token_program, bytes([35]) + bytes(permanent_delegate),
                                   [AccountMeta(mint.pubkey(), False, True)]))  # fmt: skip
        data = bytes([20, decimals]) + bytes(authority.pubkey()) + bytes([0]) + bytes(32)
        ixs.append(Instruction(self.token_program, data, [AccountMeta(mint.pubkey(), False, True)]))
        self.chain.send(ixs, [mint])
        return mint.pubkey(), authority

    def token_account(self, mint: Pubkey, owner: Pubkey) -> Pubkey:
        account = Keypair()
        init = Instruction(self.token_program, bytes([18]) + bytes(owner),
                           [AccountMeta(account.pubkey(), False, True), AccountMeta(mint, False, False)])  # fmt: skip
        self.chain.send(
            [self._new_account(ACCOUNT_LEN, self.token_program, account), init], [account]
        )
        return account.pubkey()

    def mint_to(self, mint: Pubkey, authority: Keypair, to: Pubkey, amount: int) -> None:
        data = bytes([7]) + amount.to_bytes(8, "little")
        metas = [
            AccountMeta(mint, False, True),
            AccountMeta(to, False, True),
            AccountMeta(authority.pubkey(), True, False),
        ]
        self.chain.send([Instruction(self.token_program, data, metas)], [authority])

    def balance(self, token_account: Pubkey) -> int:
        data = self.chain.account_bytes(token_account)
        return int.from_bytes(data[64:72], "little")

    # -- treasurer accounts -----------------------------------------------------------------------------
    def treasury(self, run: Pubkey) -> dict:
        return self.treasurer.decode_treasury(
            self.chain.account_bytes(self.treasurer.treasury_address(run))
        )

    def member(self, run: Pubkey, wallet: Pubkey) -> dict | None:
        data = self.chain.account_bytes(self.treasurer.member_address(run, wallet))
        return self.treasurer.decode_member(data) if data else None


class AuthorizedChain(Chain):
    """The coordinator chain whose joins name the wallet's JoinAuthorization address (the coordinator reads
    it only when the run's join policy is Authorized), and whose runs can be created at a chosen address."""

    def join_ixs(self, wallet: Keypair, run: Pubkey, node_key: Keypair | None = None,
                 authorization: Pubkey | None = None, endpoint: bytes = b"", throughput: int = 0) -> list:  # fmt: skip
        authorization = authorization or self.join_authorization_address(run, wallet.pubkey())
        return super().join_ixs(wallet, run, node_key, authorization, endpoint, throughput)

    def create_run_at(self, run: Keypair, authority: Keypair, join_authority: Pubkey,
                      run_id: bytes = b"test-run") -> Pubkey:  # fmt: skip
        size = self.idl.account_size("Run")
        create = create_account(CreateAccountParams(
            from_pubkey=self.payer.pubkey(), to_pubkey=run.pubkey(),
            lamports=self.svm.minimum_balance_for_rent_exemption(size), space=size, owner=self.program_id))  # fmt: skip
        init = self.ix("initialize_run",
                       {"payer": self.payer.pubkey(), "authority": authority.pubkey(), "run": run.pubkey(),
                        "run_index": self.run_index_address(run_id)},
                       {"run_id": run_id, "join_authority": join_authority})  # fmt: skip
        self.send([create, init], [run, authority])
        return run.pubkey()
