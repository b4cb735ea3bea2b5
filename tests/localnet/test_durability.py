"""Durability: a localnet on a ledger survives `kill -9` with every confirmed transaction's effects."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
from solana.rpc.async_api import AsyncClient
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer
from solders.sysvar import CLOCK

N_TRANSFERS = 24


class LocalnetProcess:
    """`python -m cohort.localnet start` as a child process, stopped (or killed) by the test."""

    def __init__(self, port: int, ledger: Path, log: Path) -> None:
        self.port, self.ledger, self.log = port, ledger, log
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        command = [sys.executable, "-m", "cohort.localnet", "start", "--port", str(self.port)]
        command += ["--ledger", str(self.ledger), "--slot-ms", "100", "--cheats"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            for _ in range(150):  # up to ~15 s for imports and recovery
                if self.proc.poll() is not None:
                    raise RuntimeError(f"localnet exited early:\n{self.log.read_text()}")
                try:
                    async with session.get(f"{self.url}/health") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"localnet did not answer:\n{self.log.read_text()}")

    def kill(self, sig: int = signal.SIGKILL) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=10)


def clock_unix(data: bytes) -> int:
    return int.from_bytes(data[32:40], "little", signed=True)


async def test_state_survives_kill_9_and_a_torn_log_tail(chain_type, tmp_path: Path) -> None:
    port = chain_type.free_port_pair()
    node = LocalnetProcess(port, tmp_path / "ledger", tmp_path / "localnet.log")
    try:
        await node.start()
        async with AsyncClient(node.url) as client:
            chain = chain_type(node.url, client)
            payer = await chain.funded(100)
            program = await chain.deploy(payer, chain.memo_elf())
            recipients = [Keypair().pubkey() for _ in range(N_TRANSFERS)]
            blockhash = (await client.get_latest_blockhash()).value.blockhash
            txs = [
                chain.sign(
                    payer,
                    [
                        transfer(
                            TransferParams(
                                from_pubkey=payer.pubkey(), to_pubkey=to, lamports=10**9 + i
                            )
                        )
                    ],
                    blockhash,
                )
                for i, to in enumerate(recipients)
            ]
            signatures = [
                r.value for r in await asyncio.gather(*(client.send_transaction(tx) for tx in txs))
            ]
            custom = Keypair().pubkey()
            await chain.set_account(custom, program, b"survives")
            await chain.call("localnet_warpTime", 1000)
            slot_before = (await client.get_slot()).value
            unix_before = clock_unix((await client.get_account_info(CLOCK)).value.data)
            payer_balance = (await client.get_balance(payer.pubkey())).value
            tx_count = (await client.get_transaction_count()).value

        assert node.kill() == -signal.SIGKILL
        log_file = max((tmp_path / "ledger").glob("log-*.bin"))
        with open(log_file, "ab") as f:
            f.write(b"CL\xff\x00\x00\x00\x12\x34")  # a record torn mid-write
        await node.start()
        async with AsyncClient(node.url) as client:
            assert (await client.get_balance(payer.pubkey())).value == payer_balance
            balances = (await client.get_multiple_accounts(recipients)).value
            assert [a.lamports for a in balances] == [10**9 + i for i in range(N_TRANSFERS)]
            statuses = (await client.get_signature_statuses(signatures)).value
            assert all(s is not None and s.err is None for s in statuses)
            tx = (
                await client.get_transaction(signatures[-1], max_supported_transaction_version=0)
            ).value
            assert tx.transaction.meta.post_balances[1] == 10**9 + N_TRANSFERS - 1
            assert (await client.get_account_info(custom)).value.data == b"survives"
            assert (await client.get_transaction_count()).value == tx_count
            assert (await client.get_slot()).value > slot_before
            assert clock_unix((await client.get_account_info(CLOCK)).value.data) >= unix_before
            # the program still runs, and new transactions land after the restart
            memo = Instruction(
                program, b"after restart", [AccountMeta(payer.pubkey(), True, False)]
            )
            blockhash = (await client.get_latest_blockhash()).value.blockhash
            after = await client.send_transaction(
                chain.sign(payer, [memo], blockhash), opts=chain.CONFIRMED
            )
            assert (await client.get_signature_statuses([after.value])).value[0].err is None
        assert "dropped an incomplete or corrupt tail of 8 bytes" in node.log.read_text()
        assert node.kill(signal.SIGTERM) == 0  # a clean stop writes a snapshot
        assert list((tmp_path / "ledger").glob("snapshot-*.bin"))
    finally:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait(timeout=10)
