"""`cohort demo`: a real training run on this machine, with no network.

A localnet process, the coordinator deployed over RPC, a run created from configs/demo-run.toml (a tiny
Llama, King James Bible bytes), the run explorer beside it, and three `cohort train` processes with their
own wallets and P2P nodes, which train together for two epochs. It prints the loss of every step as the
clients report it and, at each epoch end, whether every replica holds the same weights. The run has a reward
pool (the treasurer deployed too, a fresh SPL mint, a funded vault): at the end the demo prints what each
member's settled points pay and claims it for one member.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from .errors import ProgramError
from .rewards import RewardsStatus, payout_lines

REWARD_DECIMALS = 6
REWARD_PER_POINT = 1_000  # base units a settled point: 0.001 token
POOL = 1_000 * 10**REWARD_DECIMALS  # the demo's pool: 1,000 tokens, far more than two epochs earn


@dataclass(frozen=True)
class DemoPool:
    """The run's reward pool: the treasurer deployed on the demo's localnet, a fresh mint, a funded vault."""

    treasurer: Any  # cohort.sdk.treasurer.Treasurer
    run: Pubkey
    mint: Pubkey


async def fund_pool(rpc: Any, authority: Keypair, coordinator_id: Pubkey, run: Pubkey,
                    program_keypair: Path) -> DemoPool:  # fmt: skip
    """Deploy the treasurer, create a mint (the run's authority is its mint authority), create the run's
    treasury at REWARD_PER_POINT and fund its vault with POOL."""
    from . import artifacts, spl_token
    from .deploy import deploy_program
    from .treasurer import Treasurer, TreasurerClient

    elf = artifacts.program(name="treasurer").read_bytes()
    deployed = await deploy_program(rpc, authority, elf, program_keypair)
    treasurer = Treasurer(deployed.program_id, coordinator_id)
    client = TreasurerClient(rpc, treasurer)
    mint = await spl_token.read_mint(
        rpc, await spl_token.create_mint(rpc, authority, authority.pubkey(), REWARD_DECIMALS)
    )
    init = treasurer.init_treasury(authority.pubkey(), authority.pubkey(), run, mint.address,
                                   mint.token_program, REWARD_PER_POINT, 86_400)  # fmt: skip
    await client.send([init], authority)
    source = await spl_token.create_token_account(rpc, authority, mint, authority.pubkey())
    await spl_token.mint_to(rpc, authority, mint, authority, source, POOL)
    treasury = await client.treasury(run)
    await client.send([treasurer.fund(run, treasury, authority.pubkey(), source, POOL)], authority)
    return DemoPool(treasurer, run, mint.address)


async def payout(run_client: Any, pool: DemoPool, payer: Keypair, members: list[Keypair],
                 claim_for: Keypair | None = None) -> tuple[RewardsStatus, int]:  # fmt: skip
    """Settle every member's points (anyone may), and what each can claim; with `claim_for`, that member
    registers itself as its claim key and claims everything to a new token account. Returns the status
    (after the claim) and the amount claimed."""
    from . import spl_token
    from .rewards import rewards_status
    from .treasurer import TreasurerClient

    rpc = run_client.rpc
    state = await run_client.fetch_run(pool.run)
    in_registry = {bytes(e.signer) for e in state.registry if e.earned}
    for member in members:
        if bytes(member.pubkey()) in in_registry:
            # a client leaving (exit_run) may settle them first: nothing is lost either way
            with contextlib.suppress(ProgramError):
                await run_client.settle_points(payer, pool.run, member.pubkey())
    claimed = 0
    if claim_for is not None:
        client = TreasurerClient(rpc, pool.treasurer)
        owed = await client.entitlement(pool.run, claim_for.pubkey())
        if owed is not None and owed.claimable:
            await client.register_claim_key(pool.run, claim_for, claim_for.pubkey())
            mint = await spl_token.read_mint(rpc, pool.mint)
            to = await spl_token.create_token_account(rpc, claim_for, mint, claim_for.pubkey())
            await client.claim(pool.run, claim_for.pubkey(), claim_for, to)
            claimed = await spl_token.balance(rpc, to)
    points = {p.wallet: (p.claimed, p.unclaimed) for p in await run_client.points(pool.run)}
    status = await rewards_status(rpc, pool.treasurer, pool.run, points)
    assert status is not None  # fund_pool created it
    return status, claimed


def payout_summary(status: RewardsStatus, names: dict[str, str], claimed: int = 0,
                   claimed_by: str | None = None) -> list[str]:  # fmt: skip
    """The demo's closing lines: the pool, what each member (by its demo name) can claim, and the claim made."""
    lines = payout_lines(status)
    for wallet, name in names.items():
        lines = [line.replace(f"{wallet}:", f"{name} ({wallet[:8]}…):", 1) for line in lines]
    if claimed_by is not None:
        lines.append(
            f"{claimed_by} claimed {status.amount(claimed)} tokens to its own token account"
        )
    return lines


async def _demo(console: Console, clients: int, epochs: int, explorer_port: int) -> bool:
    try:
        from cohort.client.runtime.local_run import DEMO_CONFIG, LocalRun
    except ImportError as e:  # a base install: the training client is the `train` extra
        console.print(
            f"[red]the demo trains models: install cohort[train] ({e.name} is missing)[/]"
        )
        return False
    from .explorer import Explorer

    say = console.print
    with tempfile.TemporaryDirectory(prefix="cohort-demo-") as tmp:
        root = Path(tmp)
        say(
            "[bold]1.[/] a localnet (Agave's runtime behind JSON-RPC), the coordinator deployed over RPC"
        )
        async with LocalRun(
            config=DEMO_CONFIG, root=root, checkpointers=1, log=lambda m: say(f"   {m}")
        ) as lr:
            wallets = [lr.new_wallet(f"client-{i}") for i in range(clients)]
            for wallet, _ in wallets:
                await lr.fund(wallet)
            run_file = await lr.create_run([w for w, _ in wallets])
            address = await lr.client.resolve(run_file.run_id)
            pool = await fund_pool(
                lr.rpc, lr.authority, lr.program_id, address, root / "treasurer-keypair.json"
            )
            say(f"   a reward pool: {POOL // 10**REWARD_DECIMALS:,} tokens of a fresh SPL mint in the treasurer's "
                f"vault, {REWARD_PER_POINT} base units a settled point")  # fmt: skip
            say(
                f"[bold]2.[/] run {run_file.run_id!r}: a {run_file.metadata.num_parameters:,}-parameter Llama on "
                f"KJV text, DisTrO, {run_file.config.witness_nodes} witnesses a round"
            )
            explorer = Explorer(lr.http_url, lr.ws_url, lr.program_id, root / "explorer.sqlite", port=explorer_port,
                                treasurer_id=pool.treasurer.program_id)  # fmt: skip
            try:
                await explorer.start()
            except OSError:  # the port is taken: any free one will do
                await explorer.stop()
                explorer = Explorer(lr.http_url, lr.ws_url, lr.program_id, root / "explorer.sqlite", port=0,
                                    treasurer_id=pool.treasurer.program_id)  # fmt: skip
                await explorer.start()
            async with contextlib.AsyncExitStack() as stack:
                stack.push_async_callback(explorer.stop)
                say(
                    f"[bold]3.[/] the run explorer: [link={explorer.url}]{explorer.url}[/link] (open it to watch)"
                )
                trainers = [lr.start_trainer(f"client-{i}", w) for i, w in enumerate(wallets)]
                say(
                    f"[bold]4.[/] {clients} `cohort train` processes join and train (logs in {root})"
                )
                ok = await _follow(console, lr, trainers, epochs)
                if ok:
                    members = [w for w, _ in wallets]
                    status, claimed = await payout(
                        lr.client, pool, lr.authority, members, members[0]
                    )
                    names = {str(w.pubkey()): f"client-{i}" for i, w in enumerate(members)}
                    say(
                        "[bold]5.[/] rewards: what each member's settled points pay (`cohort rewards status`)"
                    )
                    for line in payout_summary(status, names, claimed, "client-0"):
                        say(f"   {line}")
                say("[bold]6.[/] stopping the clients (each leaves the run with exit_run)")
    return ok


async def _follow(console: Console, lr, trainers, epochs: int) -> bool:
    """Print each step's loss and each epoch's replica check until `epochs` epochs are over."""
    printed_steps: set[int] = set()
    printed_epochs: set[int] = set()
    first_loss = last_loss = None
    same = True
    deadline = asyncio.get_running_loop().time() + 120 + epochs * 180
    while True:
        losses: dict[int, list[float]] = {}
        for t in trainers:
            for e in t.events("trained"):
                losses.setdefault(e["step"], []).append(e["loss"])
        for step in sorted(losses):
            if step not in printed_steps and len(losses[step]) == len(trainers):
                printed_steps.add(step)
                loss = statistics.mean(losses[step])
                first_loss = loss if first_loss is None else first_loss
                last_loss = loss
                console.print(f"   step {step:>3}  loss {loss:.4f}  "
                              f"[dim]({', '.join(f'{x:.3f}' for x in losses[step])})[/]")  # fmt: skip
        ends: dict[int, list[str]] = {}
        for t in trainers:
            for e in t.events("epoch_end"):
                ends.setdefault(e["epoch"], []).append(e["digest"])
        for epoch in sorted(ends):
            if epoch not in printed_epochs and len(ends[epoch]) == len(trainers):
                printed_epochs.add(epoch)
                equal = len(set(ends[epoch])) == 1
                same &= equal
                verdict = "[green]all replicas equal[/]" if equal else "[red]replicas differ[/]"
                console.print(
                    f"   [bold]epoch {epoch} done[/]: parameter sha256 {ends[epoch][0][:16]}… {verdict}"
                )
        if len(printed_epochs) >= epochs:
            break
        dead = [t.name for t in trainers if not t.alive]
        if dead or asyncio.get_running_loop().time() > deadline:
            console.print(
                f"[red]stopped early: {'clients exited: ' + ', '.join(dead) if dead else 'too slow'}[/]"
            )
            for t in trainers:
                tail = t.log_path.read_text()[-600:] if t.log_path.exists() else ""
                if tail.strip():
                    console.print(f"[dim]{t.name}: {tail}[/]")
            return False
        await asyncio.sleep(0.5)
    console.print(f"   loss {first_loss:.4f} → {last_loss:.4f} over {len(printed_steps)} steps; "
                  + ("[green]every replica ended every epoch with identical weights[/]" if same
                     else "[red]replicas diverged[/]"))  # fmt: skip
    return same and last_loss is not None and first_loss is not None and last_loss < first_loss


def run(
    console: Console | None = None, clients: int = 3, epochs: int = 2, explorer_port: int = 0
) -> bool:
    console = console or Console()
    console.rule("[bold]cohort demo")
    ok = asyncio.run(_demo(console, clients, epochs, explorer_port))
    console.print(
        "[green]done.[/] Next: `cohort --help`." if ok else "[red]the demo did not complete.[/]"
    )
    return ok
