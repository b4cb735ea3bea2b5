"""The few SPL Token / Token-2022 operations the rewards commands and the demo need, over `cohort.sdk.rpc.Rpc`:
read a mint and a token account, create a mint or a token account, mint to one. Both token programs share
these instructions and the base layouts (a mint's first 82 bytes, a token account's first 165)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account

from .errors import CohortError
from .treasurer import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID

TOKEN_PROGRAMS = (TOKEN_PROGRAM_ID, TOKEN_2022_PROGRAM_ID)
MINT_LEN = 82
ACCOUNT_LEN = 165
_INITIALIZE_ACCOUNT3 = 18
_INITIALIZE_MINT2 = 20
_MINT_TO = 7


class TokenError(CohortError):
    """An address is not the mint or token account a command needs."""


@dataclass(frozen=True)
class Mint:
    address: Pubkey
    token_program: Pubkey
    decimals: int
    supply: int
    mint_authority: Pubkey | None


@dataclass(frozen=True)
class TokenAccount:
    address: Pubkey
    token_program: Pubkey
    mint: Pubkey
    owner: Pubkey
    amount: int


async def read_mint(rpc: Any, address: Pubkey) -> Mint:
    found = await rpc.account_owner_and_data(address)
    if found is None:
        raise TokenError(f"no mint at {address} on this cluster")
    owner, data = found
    # a Token-2022 mint with extensions is padded to an account's length and typed 1 at byte 165
    is_mint = len(data) == MINT_LEN or (len(data) > ACCOUNT_LEN and data[ACCOUNT_LEN] == 1)
    if owner not in TOKEN_PROGRAMS or not is_mint or not data[45]:
        raise TokenError(f"{address} is not an initialized SPL Token or Token-2022 mint")
    authority = Pubkey.from_bytes(data[4:36]) if data[0] else None
    return Mint(address, owner, data[44], int.from_bytes(data[36:44], "little"), authority)


async def read_token_account(rpc: Any, address: Pubkey) -> TokenAccount:
    found = await rpc.account_owner_and_data(address)
    if found is None:
        raise TokenError(f"no token account at {address} on this cluster")
    owner, data = found
    if owner not in TOKEN_PROGRAMS or len(data) < ACCOUNT_LEN or len(data) == MINT_LEN:
        raise TokenError(f"{address} is not an SPL Token or Token-2022 token account")
    return TokenAccount(address, owner, Pubkey.from_bytes(data[0:32]),
                        Pubkey.from_bytes(data[32:64]), int.from_bytes(data[64:72], "little"))  # fmt: skip


async def balance(rpc: Any, address: Pubkey) -> int:
    return (await read_token_account(rpc, address)).amount


async def _new_account(
    rpc: Any, payer: Keypair, account: Keypair, space: int, owner: Pubkey
) -> Instruction:
    lamports = await rpc.rent_exempt(space)
    return create_account(CreateAccountParams(from_pubkey=payer.pubkey(), to_pubkey=account.pubkey(),
                                              lamports=lamports, space=space, owner=owner))  # fmt: skip


async def create_mint(rpc: Any, payer: Keypair, authority: Pubkey, decimals: int,
                      token_program: Pubkey = TOKEN_PROGRAM_ID) -> Pubkey:  # fmt: skip
    """A new mint (no freeze authority, no extensions) with `authority` as its mint authority."""
    mint = Keypair()
    data = (
        bytes([_INITIALIZE_MINT2, decimals]) + bytes(authority) + bytes(33)
    )  # freeze authority: none
    init = Instruction(token_program, data, [AccountMeta(mint.pubkey(), False, True)])
    await rpc.send(
        [await _new_account(rpc, payer, mint, MINT_LEN, token_program), init], payer, [mint]
    )
    return mint.pubkey()


async def create_token_account(rpc: Any, payer: Keypair, mint: Mint, owner: Pubkey) -> Pubkey:
    """A new token account of `mint` owned by `owner` (a keypair account: the localnet has no associated
    token account program)."""
    account = Keypair()
    init = Instruction(mint.token_program, bytes([_INITIALIZE_ACCOUNT3]) + bytes(owner),
                       [AccountMeta(account.pubkey(), False, True), AccountMeta(mint.address, False, False)])  # fmt: skip
    create = await _new_account(rpc, payer, account, ACCOUNT_LEN, mint.token_program)
    await rpc.send([create, init], payer, [account])
    return account.pubkey()


async def mint_to(
    rpc: Any, payer: Keypair, mint: Mint, authority: Keypair, to: Pubkey, amount: int
) -> None:
    metas = [AccountMeta(mint.address, False, True), AccountMeta(to, False, True),
             AccountMeta(authority.pubkey(), True, False)]  # fmt: skip
    ix = Instruction(mint.token_program, bytes([_MINT_TO]) + amount.to_bytes(8, "little"), metas)
    await rpc.send([ix], payer, [authority] if authority.pubkey() != payer.pubkey() else [])
