"""Fixtures for the localnet tests: an in-process localnet on free loopback ports, real clients, helpers."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.models import TxOpts
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.transaction import Transaction, VersionedTransaction

from cohort.localnet.config import LocalnetConfig
from cohort.localnet.server import Localnet, free_port_pair
from cohort.sdk import loader_v3

MEMO_PROGRAM = Pubkey.from_string("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
LAMPORTS_PER_SOL = 1_000_000_000
CONFIRMED = TxOpts(skip_confirmation=False, preflight_commitment=Confirmed)


def memo_elf() -> bytes:
    """A real SBF program: SPL Memo as bundled with LiteSVM (loader v2, so its account data is the ELF)."""
    return bytes(LiteSVM().get_account(MEMO_PROGRAM).data)


def sign(payer: Keypair, instructions: list[Instruction], blockhash: Hash, *signers: Keypair):
    message = MessageV0.try_compile(payer.pubkey(), instructions, [], blockhash)
    return VersionedTransaction(message, [payer, *signers])


@pytest.fixture
async def localnet() -> AsyncIterator[Localnet]:
    async with Localnet(LocalnetConfig(port=0, cheats=True)) as net:
        yield net


@pytest.fixture
async def client(localnet: Localnet) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(localnet.http_url) as c:
        yield c


class Chain:
    """Test helpers bound to one localnet (a fixture, since test modules cannot import each other)."""

    LAMPORTS_PER_SOL = LAMPORTS_PER_SOL
    CONFIRMED = CONFIRMED
    MEMO_PROGRAM = MEMO_PROGRAM
    sign = staticmethod(sign)
    memo_elf = staticmethod(memo_elf)
    free_port_pair = staticmethod(free_port_pair)

    def __init__(self, http_url: str, client: AsyncClient) -> None:
        self.http_url = http_url
        self.client = client

    async def funded(self, sol: int = 10) -> Keypair:
        """A new keypair holding `sol` SOL from the faucet (a real, confirmed airdrop transaction)."""
        keypair = Keypair()
        signature = (
            await self.client.request_airdrop(keypair.pubkey(), sol * LAMPORTS_PER_SOL)
        ).value
        await asyncio.wait_for(self.client.confirm_transaction(signature), 10)
        return keypair

    async def call(self, method: str, *params: Any) -> Any:
        """A raw JSON-RPC call (for methods solana-py does not know); returns the whole response."""
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.http_url, json=body) as r,
        ):
            return await r.json()

    async def set_account(
        self, key: Pubkey, owner: Pubkey, data: bytes, lamports: int = LAMPORTS_PER_SOL
    ) -> None:
        spec = {
            "lamports": lamports,
            "owner": str(owner),
            "data": [base64.b64encode(data).decode(), "base64"],
        }
        assert (await self.call("localnet_setAccount", str(key), spec))["result"] is True

    async def write_buffer(self, payer: Keypair, elf: bytes) -> Keypair:
        """A loader-v3 buffer holding `elf`: create + initialize, then the writes (concurrently: independent)."""
        client = self.client
        buffer = Keypair()
        size = loader_v3.BUFFER_HEADER + len(elf)
        rent = (await client.get_minimum_balance_for_rent_exemption(size)).value
        blockhash = (await client.get_latest_blockhash()).value.blockhash
        create = loader_v3.create_buffer(
            payer.pubkey(), buffer.pubkey(), payer.pubkey(), len(elf), rent
        )
        await client.send_transaction(sign(payer, create, blockhash, buffer), opts=CONFIRMED)
        chunk = loader_v3.max_write_chunk(payer.pubkey(), payer.pubkey())
        # legacy messages: max_write_chunk sizes chunks for them (a v0 message is 2 bytes longer)
        writes = [
            Transaction.new_signed_with_payer(
                [loader_v3.write(buffer.pubkey(), payer.pubkey(), w.offset, w.chunk)],
                payer.pubkey(),
                [payer],
                blockhash,
            )
            for w in loader_v3.plan_writes(elf, chunk)
        ]
        await asyncio.gather(*(client.send_transaction(tx) for tx in writes))
        return buffer

    async def deploy(self, payer: Keypair, elf: bytes) -> Pubkey:
        """Deploy `elf` as a new upgradeable program through real loader-v3 transactions."""
        client = self.client
        buffer = await self.write_buffer(payer, elf)
        program = Keypair()
        rent = (await client.get_minimum_balance_for_rent_exemption(loader_v3.PROGRAM_SIZE)).value
        deploy = loader_v3.deploy_with_max_data_len(
            payer.pubkey(), program.pubkey(), buffer.pubkey(), payer.pubkey(), rent, 2 * len(elf)
        )
        blockhash = (await client.get_latest_blockhash()).value.blockhash
        await client.send_transaction(sign(payer, deploy, blockhash, program), opts=CONFIRMED)
        return program.pubkey()


@pytest.fixture
def chain_type() -> type[Chain]:
    """For tests that start their own localnet."""
    return Chain


@pytest.fixture
def chain(localnet: Localnet, client: AsyncClient) -> Chain:
    return Chain(localnet.http_url, client)


@pytest.fixture
async def payer(chain: Chain) -> Keypair:
    return await chain.funded()
