"""`cohort demo`: a real training run on this machine, with no network.

A localnet process, the coordinator deployed over RPC, a run created from configs/demo-run.toml (a tiny
Llama, King James Bible bytes), the run explorer beside it, and three `cohort train` processes with their
own wallets and P2P nodes, which train together for two epochs. It prints the loss of every step as the
clients report it and, at each epoch end, whether every replica holds the same weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
from pathlib import Path

from rich.console import Console


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
            say(
                f"[bold]2.[/] run {run_file.run_id!r}: a {run_file.metadata.num_parameters:,}-parameter Llama on "
                f"KJV text, DisTrO, {run_file.config.witness_nodes} witnesses a round"
            )
            explorer = Explorer(
                lr.http_url, lr.ws_url, lr.program_id, root / "explorer.sqlite", port=explorer_port
            )
            try:
                await explorer.start()
            except OSError:  # the port is taken: any free one will do
                await explorer.stop()
                explorer = Explorer(
                    lr.http_url, lr.ws_url, lr.program_id, root / "explorer.sqlite", port=0
                )
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
                say("[bold]5.[/] stopping the clients (each leaves the run with exit_run)")
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
