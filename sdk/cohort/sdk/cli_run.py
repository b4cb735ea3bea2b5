"""`cohort run`: create, steer and inspect training runs."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from .cli_common import Settings, chain_options, echo_json, json_option, run
from .errors import ConfigError

if TYPE_CHECKING:
    from solders.pubkey import Pubkey

    from .rewards import RewardsStatus
    from .run_config import RunFile

T = TypeVar("T")


@click.group(name="run")
def run_group() -> None:
    """Create, steer and inspect training runs (RUN is a run id or its account address)."""


async def _with_client(settings: Settings, body: Callable[[Any, Any], Awaitable[T]]) -> T:
    """Open the RPC, check it answers and that the program id holds the coordinator, and run
    `body(client, core)`."""
    from .coordinator_core import CoordinatorCore
    from .program_check import check_coordinator, probe_rpc

    core = CoordinatorCore()
    async with settings.rpc() as rpc:
        await probe_rpc(rpc)  # a wrong URL reads "cannot reach", before any program id is looked up
        settings.reachable = True
        program_id = settings.program_id()
        await check_coordinator(rpc, program_id, settings.cluster, rpc.idl)
        return await body(settings.run_client(rpc), core)


def _load_config(path: Path):
    from .coordinator_core import CoordinatorCore
    from .run_config import load_run_file

    return load_run_file(path, CoordinatorCore())


@run_group.command()
@click.option("--demo", is_flag=True, help="The demo's config instead (a tiny Llama on KJV text).")
def example(demo: bool) -> None:
    """Print a run config with every key documented, to start from: `cohort run example > run.toml`."""
    from .run_config import packaged_config

    click.echo(
        packaged_config("demo-run.toml" if demo else "example-run.toml").read_text(), nl=False
    )


@run_group.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--paused", is_flag=True, help="Leave the run paused (open it later with `run resume`)."
)
@click.option("--stakes", is_flag=True,
              help='Let the treasurer admit staked wallets: the join authority becomes the run\'s treasury joiner '
                   '(needs join_policy = "Authorized"; then `cohort rewards init` and `cohort rewards init-stakes`).')  # fmt: skip
@json_option
@chain_options
def create(settings: Settings, config: Path, paused: bool, stakes: bool, as_json: bool) -> None:
    """Create a run from a CONFIG file (`cohort run example` prints a documented one); the wallet becomes
    its authority."""
    from solders.keypair import Keypair

    run_file = _load_config(config)  # validated before anything else
    if stakes and run_file.config.join_policy != "Authorized":
        raise ConfigError(
            f'--stakes needs join_policy = "Authorized" in {config} (stakes decide who joins)'
        )
    authority = settings.keypair()
    run_account = Keypair()
    join_authority = _stakes_joiner(settings, run_account.pubkey()) if stakes else None

    async def body(client, core):
        return await client.create_run(authority, run_file, open_run=not paused,
                                       join_authority=join_authority, run_account=run_account)  # fmt: skip

    address = run(_with_client(settings, body))
    if as_json:
        echo_json({"run_id": run_file.run_id, "address": str(address), "open": not paused,
                   "memory": _memory_json(run_file), "join_authority": str(join_authority or authority.pubkey())})  # fmt: skip
        return
    state = "not open yet: `cohort run resume` opens it" if paused else "open for members"
    click.echo(f"created run {run_file.run_id} at {address} ({state})")
    if stakes:
        click.echo(f"the treasurer admits staked wallets (join authority {join_authority}): next "
                   f"`cohort rewards init {run_file.run_id}` and `cohort rewards init-stakes {run_file.run_id}`")  # fmt: skip
    click.echo(_memory_line(run_file))


def _stakes_joiner(settings: Settings, run_address: Pubkey) -> Pubkey:
    """The joiner PDA of the treasury the run will have: a staking run's join authority."""
    from .config import resolve_program_id
    from .treasurer import PROGRAM_NAME, joiner_address, treasury_address

    treasurer = resolve_program_id(settings.workspace, settings.cluster, None, PROGRAM_NAME)
    return joiner_address(treasurer, treasury_address(treasurer, run_address))


def _memory_json(run_file: RunFile) -> dict[str, Any] | None:
    """_memory_line's figures for --json (None when the preset's memory is not known)."""
    from .presets import training_spec
    from .sizing import estimate_disk, run_estimate

    estimate = run_estimate(training_spec(run_file.metadata, run_file.model), run_file.config)
    if estimate is None:
        return None
    disk = estimate_disk(estimate.parameters, run_file.config.verification_percent)
    return {**estimate.to_json(), "untrainable": estimate.untrainable, "disk": disk.to_json()}


def _memory_line(run_file: RunFile) -> str:
    """What one member needs for the run (sizing.py): memory, and whether any single member can hold it, and
    disk."""
    from .presets import training_spec
    from .sizing import estimate_disk, run_estimate

    spec = training_spec(run_file.metadata, run_file.model)
    estimate = run_estimate(spec, run_file.config)
    if estimate is None:
        return f"a member's memory is not known for preset {spec.preset!r} ({spec.architecture})"
    mark = estimate.untrainable
    disk = estimate_disk(estimate.parameters, run_file.config.verification_percent)
    return estimate.summary() + f"; {disk.summary()}" + (f"; {mark}" if mark else "")


@run_group.command()
@click.option("--vocab-size", type=click.IntRange(min=2), default=256, show_default=True,
              help="The run's vocabulary (256: the built-in corpora, read byte by byte).")  # fmt: skip
@click.option("--max-seq-len", type=click.IntRange(min=2), default=512, show_default=True,
              help="The run's sequence length.")  # fmt: skip
@click.option("--micro-batch-size", type=click.IntRange(min=1), default=1, show_default=True,
              help="Sequences per forward/backward on a member.")  # fmt: skip
@click.option("--verification/--no-verification", default=True, show_default=True,
              help="Whether the run verifies results (members then keep what checks need).")  # fmt: skip
@json_option
def presets(
    vocab_size: int, max_seq_len: int, micro_batch_size: int, verification: bool, as_json: bool
) -> None:
    """List the model presets with their parameters and the memory one member needs to train each; presets
    no single member can hold are marked."""
    from rich.markup import escape

    from .presets import MODEL_PRESETS
    from .sizing import estimate_for, format_bytes, format_count

    rows = []
    for name, preset in MODEL_PRESETS.items():
        estimate = estimate_for(preset.architecture, preset.hf_config, vocab_size=vocab_size,
                                max_seq_len=max_seq_len, micro_batch_size=micro_batch_size,
                                verification=verification)  # fmt: skip
        rows.append({"preset": name, "architecture": preset.architecture, "description": preset.description,
                     "memory": estimate.to_json() if estimate else None,
                     "untrainable": estimate.untrainable if estimate else None})  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("preset", "parameters", "a member needs", "about",
                  title=f"vocabulary {vocab_size}, sequences of {max_seq_len} tokens, micro-batches of "
                        f"{micro_batch_size}, verification {'on' if verification else 'off'}")  # fmt: skip
    for row in rows:
        memory, mark = row["memory"], row["untrainable"]
        about = escape(row["description"])
        if mark:
            about = f"[bold red]{escape(mark)}[/]. {about}"
        table.add_row(row["preset"], format_count(memory["parameters"]) if memory else "unknown",
                      format_bytes(memory["total"]) if memory else "unknown", about)  # fmt: skip
    Console().print(table)


@run_group.command()
@click.argument("run_ref", metavar="RUN")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@chain_options
def update(settings: Settings, run_ref: str, config: Path, as_json: bool) -> None:
    """Apply CONFIG to RUN (metadata, config, model, checkpointers). The program only allows it while the
    run is paused; progress (epoch, step) is kept."""
    run_file = _load_config(config)
    authority = settings.keypair()

    async def body(client, core):
        return await client.update_run(authority, run_ref, run_file)

    sent = run(_with_client(settings, body))
    if as_json:
        echo_json({"run": run_ref, "updated": bool(sent)})
    else:
        click.echo(f"updated run {run_ref}" if sent else f"run {run_ref} already matches {config}")


def _pause_command(paused: bool):
    verb = "pause" if paused else "resume"
    doc = (
        "Pause RUN: at once while waiting or warming up, else at the end of the current round."
        if paused
        else "Resume a paused RUN (it waits for members again), or cancel a pending pause."
    )

    @run_group.command(name=verb, help=doc)
    @click.argument("run_ref", metavar="RUN")
    @json_option
    @chain_options
    def command(settings: Settings, run_ref: str, as_json: bool) -> None:
        authority = settings.keypair()

        async def body(client, core):
            await client.set_paused(authority, run_ref, paused)
            return await client.fetch_run(run_ref)

        state = run(_with_client(settings, body))
        if as_json:
            echo_json({"run_id": state.run_id, "address": str(state.address), "phase": str(state.state),
                        "pending_pause": state.pending_pause})  # fmt: skip
            return
        pending = " (takes effect when the current round ends)" if state.pending_pause else ""
        click.echo(f"run {state.run_id}: {state.state}{pending}")

    return command


pause = _pause_command(True)
resume = _pause_command(False)


async def _status(client, core, run_ref: str, treasurer_id: Pubkey | None = None) -> dict[str, Any]:
    from .status import latest_loss, summarize

    state = await client.fetch_run(run_ref)
    now = await client.rpc.unix_time()
    loss = latest_loss(client.idl, client.program_id, await client.rpc.recent_logs(state.address))
    summary = summarize(state, core, now, loss)
    rewards = await _rewards(client, state.address, treasurer_id) if treasurer_id else None
    if rewards is not None:  # a run without a treasury shows what it always did
        summary["rewards"] = rewards.to_json()
    return summary


async def _rewards(client, address: Pubkey, treasurer_id: Pubkey) -> RewardsStatus | None:
    """The run's treasury and its members' rewards, or None when the run has none."""
    from .rewards import RewardsError, rewards_status
    from .treasurer import Treasurer

    found = await client.rpc.account_owner_and_data(treasurer_id)
    if found is None:  # no treasurer deployed here: no run has rewards
        return None
    points = {p.wallet: (p.claimed, p.unclaimed) for p in await client.points(address)}
    try:
        return await rewards_status(
            client.rpc, Treasurer(treasurer_id, client.program_id), address, points
        )
    except RewardsError:  # a treasury bound to another coordinator pays nothing of this run
        return None


def _treasurer_id(settings: Settings) -> Pubkey | None:
    """The treasurer's id on this cluster, when one was deployed or configured (else no run has rewards)."""
    from .config import resolve_program_id
    from .treasurer import PROGRAM_NAME

    try:
        return resolve_program_id(settings.workspace, settings.cluster, None, PROGRAM_NAME)
    except ConfigError:
        return None


@run_group.command()
@click.argument("run_ref", metavar="RUN")
@json_option
@chain_options
def status(settings: Settings, run_ref: str, as_json: bool) -> None:
    """Show RUN: phase, epoch, step, time left, clients with health and role, witnesses, checkpoint, loss,
    and its rewards when it has a treasury (vault, members' earned / claimed / staked, slashes)."""
    from .status import render

    treasurer_id = _treasurer_id(settings)
    summary = run(
        _with_client(settings, lambda client, core: _status(client, core, run_ref, treasurer_id))
    )
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    console = Console()
    render(summary, console)
    if "rewards" in summary:
        from .cli_rewards import render_status
        from .rewards import RewardsStatus

        render_status(RewardsStatus.from_json(summary["rewards"]), console)


@run_group.command(name="list")
@json_option
@chain_options
def list_runs(settings: Settings, as_json: bool) -> None:
    """List the runs of the coordinator program on the cluster."""

    async def body(client, core):
        return await client.list_runs()

    runs = run(_with_client(settings, body))
    rows = [
        {"run_id": r.run_id, "address": str(r.address), "name": r.metadata.name, "phase": str(r.state),
         "epoch": r.progress.epoch, "step": r.progress.step, "total_steps": r.config.total_steps,
         "clients": len(r.clients), "authority": str(r.authority)}
        for r in runs
    ]  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no runs")
        return
    table = Table("run", "name", "phase", "epoch", "step", "address")
    for r in rows:
        table.add_row(r["run_id"], r["name"], r["phase"], str(r["epoch"]),
                      f"{r['step']}/{r['total_steps']}", r["address"])  # fmt: skip
    Console().print(table)


@run_group.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per change.")
@click.option("--count", type=click.IntRange(min=1), help="Stop after this many updates.")
@click.option("--poll-interval", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="Seconds between polls while the websocket is down.")  # fmt: skip
@chain_options
def watch(
    settings: Settings, run_ref: str, as_json: bool, count: int | None, poll_interval: float
) -> None:
    """Follow RUN: one line per change (websocket, with polling while it is down). Ctrl-C stops."""

    async def body(client, core):
        seen = 0
        async for state in client.watch(run_ref, poll_interval=poll_interval):
            line = {"nonce": state.nonce, "phase": str(state.state), "epoch": state.progress.epoch,
                    "step": state.progress.step, "clients": len(state.clients),
                    "pending_pause": state.pending_pause}  # fmt: skip
            if as_json:
                click.echo(json.dumps(line))
            else:
                click.echo(f"#{state.nonce}  {state.state:<17} epoch {state.progress.epoch}  "
                           f"step {state.progress.step}/{state.config.total_steps}  "
                           f"{len(state.clients)} clients")  # fmt: skip
            seen += 1
            if count is not None and seen >= count:
                return
        click.echo("the run was closed")

    try:
        run(_with_client(settings, body))
    except KeyboardInterrupt:
        pass


@run_group.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--recipient", help="Who receives the rent (default: the wallet).")
@json_option
@chain_options
def close(settings: Settings, run_ref: str, recipient: str | None, as_json: bool) -> None:
    """Close a halted RUN and refund its rent (pause it first)."""
    from solders.pubkey import Pubkey

    authority = settings.keypair()
    try:
        to = Pubkey.from_string(recipient) if recipient else None
    except ValueError:
        raise ConfigError(f"--recipient {recipient!r} is not a base58 address") from None

    async def body(client, core):
        await client.close_run(authority, run_ref, to)

    run(_with_client(settings, body))
    if as_json:
        echo_json({"run": run_ref, "closed": True, "recipient": str(to or authority.pubkey())})
    else:
        click.echo(f"closed run {run_ref}")


@run_group.command()
@click.argument("run_ref", metavar="RUN")
@click.argument("wallet_address", metavar="WALLET")
@click.option(
    "--revoke", is_flag=True, help="Withdraw the permission (and the wallet's pending join)."
)
@click.option(
    "--close", "close_account", is_flag=True,
    help="Revoke by closing the permission's account; its rent goes back to the join authority.",
)  # fmt: skip
@json_option
@chain_options
def authorize(settings: Settings, run_ref: str, wallet_address: str, revoke: bool, close_account: bool,
              as_json: bool) -> None:  # fmt: skip
    """Let WALLET join RUN (runs whose join_policy is Authorized); signed by the join authority."""
    join_authority = settings.keypair()
    grantee = _wallet_address(wallet_address)

    async def body(client, core):
        state = await client.fetch_run(run_ref)
        if close_account:
            await client.close_join_authorization(join_authority, state.address, grantee)
        else:
            await client.set_join_authorization(
                join_authority, state.address, grantee, allowed=not revoke
            )
        return state

    state = run(_with_client(settings, body))
    if as_json:
        echo_json({"run_id": state.run_id, "wallet": str(grantee), "allowed": not (revoke or close_account),
                    "account_closed": close_account, "join_policy": str(state.config.join_policy)})  # fmt: skip
        return
    done = "closed the authorization of" if close_account else "revoked" if revoke else "authorized"
    click.echo(f"{done} {grantee} for run {run_ref}")
    if state.config.join_policy == "Open":
        click.echo(f"note: run {run_ref} is Open (anyone may join), so this has no effect unless its "
                   'join_policy becomes "Authorized" (`cohort run update`)')  # fmt: skip


def _wallet_address(text: str):
    from solders.pubkey import Pubkey

    try:
        return Pubkey.from_string(text)
    except ValueError:
        raise ConfigError(f"WALLET {text!r} is not a base58 address") from None


@run_group.command()
@click.argument("run_ref", metavar="RUN")
@click.argument("wallet_address", metavar="WALLET", required=False)
@json_option
@chain_options
def points(settings: Settings, run_ref: str, wallet_address: str | None, as_json: bool) -> None:
    """Show the reward points of WALLET (default: every wallet) in RUN: claimed ones (kept in the wallet's
    Points account, they outlive leaving the run) and unclaimed ones (still in the run's registry)."""
    wallet = _wallet_address(wallet_address) if wallet_address else None

    async def body(client, core):
        return await client.points(run_ref, wallet)

    rows = [{"wallet": str(p.wallet), "claimed": p.claimed, "unclaimed": p.unclaimed, "total": p.total}
            for p in run(_with_client(settings, body))]  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no points in run {run_ref} yet")
        return
    table = Table("wallet", "claimed", "unclaimed", "total")
    for r in rows:
        table.add_row(r["wallet"], str(r["claimed"]), str(r["unclaimed"]), str(r["total"]))
    Console().print(table)
