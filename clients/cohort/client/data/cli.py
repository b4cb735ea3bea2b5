"""`cohort data …`: prepare shards, train a tokenizer, serve prepared data over TCP."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from cohort.localnet.config import is_loopback

_JSON = click.option(
    "--json", "as_json", is_flag=True, help="Print the result as JSON (progress stays on stderr)."
)


@click.group("data")
def data_group() -> None:
    """Training data: tokenizers, prepared shards, the TCP data server."""


@data_group.command("prepare")
@click.argument("source")
@click.option(
    "--tokenizer",
    "tokenizer_spec",
    default="byte",
    show_default=True,
    help='"byte" or a tokenizer.json (or a directory holding one).',
)
@click.option("--out", required=True, type=click.Path(path_type=Path), help="New output directory.")
@click.option("--heldout-fraction", default=0.05, show_default=True, help="Validation split share.")
@click.option("--shard-tokens", default=1 << 27, show_default=True, help="Tokens per shard file.")
@click.option(
    "--vocab-size", type=int, help="Refuse a tokenizer whose vocabulary differs (the run's)."
)
@click.option(
    "--text-column",
    default="text",
    show_default=True,
    help="The column (or JSON field) holding each row's text, for parquet/arrow/jsonl sources.",
)
@_JSON
def prepare_command(
    source: str,
    tokenizer_spec: str,
    out: Path,
    heldout_fraction: float,
    shard_tokens: int,
    vocab_size: int | None,
    text_column: str,
    as_json: bool,
) -> None:
    """Tokenize SOURCE into shards with an index and a manifest hash. SOURCE: a text file, a directory
    of text files, kjv/pydoc, parquet/arrow/jsonl shards (a file or a directory of them: each row's
    --text-column is a document), or a Hub dataset hf://datasets/OWNER/NAME[@REVISION][/PATH]."""
    from tqdm import tqdm

    from .preparation import prepare, source_size
    from .shards import DataError
    from .tokenizer import check_vocab, load_tokenizer

    if out.exists():
        raise click.ClickException(f"{out} exists; choose a new output directory")
    try:
        tokenizer = load_tokenizer(tokenizer_spec)
        if vocab_size is not None:
            check_vocab(tokenizer, vocab_size)
        total, unit = source_size(source, text_column)
        with tqdm(total=total, unit=unit, unit_scale=True, desc="tokenizing") as bar:
            result = prepare(
                source,
                tokenizer,
                out,
                heldout_fraction=heldout_fraction,
                shard_tokens=shard_tokens,
                progress=bar.update,
                text_column=text_column,
            )
    except (DataError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps({"path": str(result.path), "tokens": result.n_tokens, "shards": result.shards,
                               "manifest_hash": result.manifest_hash.hex()}, indent=2))  # fmt: skip
        return
    click.echo(f"{result.n_tokens} tokens in {result.shards} shards at {result.path}")
    click.echo(f"manifest hash {result.manifest_hash.hex()}")


@data_group.command("train-tokenizer")
@click.argument("source")
@click.option("--vocab-size", required=True, type=int, help="Tokens, end-of-text included.")
@click.option(
    "--out", required=True, type=click.Path(path_type=Path), help="tokenizer.json to write."
)
@_JSON
def train_tokenizer_command(source: str, vocab_size: int, out: Path, as_json: bool) -> None:
    """Train a byte-level BPE on SOURCE (what `data prepare` reads: text, kjv/pydoc, or shards), offline."""
    from .preparation import pieces, source_texts
    from .shards import DataError
    from .tokenizer import train_bpe

    if out.exists():
        raise click.ClickException(f"{out} exists")
    try:
        texts = (p for text in source_texts(source) for p in pieces(text))
        tokenizer = train_bpe(texts, vocab_size)
    except (DataError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.inner.save(str(out))
    if as_json:
        click.echo(json.dumps({"path": str(out), "vocab_size": tokenizer.vocab_size}, indent=2))
        return
    click.echo(f"{tokenizer.vocab_size}-token BPE written to {out}")


@data_group.command("serve")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=0, show_default=True, help="0 picks a free port.")
def serve_command(directory: Path, host: str, port: int) -> None:
    """Serve a prepared DIRECTORY to clients by batch id (data_location tcp://HOST:PORT)."""
    from .shards import DataError, LocalShards, directory_manifest
    from .tcp import DataServer

    try:
        source = LocalShards(directory)
        manifest = directory_manifest(directory).hash().hex()
    except (DataError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    if not is_loopback(host):
        click.secho(
            f"WARNING: serving on {host}, reachable from other machines", fg="red", err=True
        )
    server = DataServer(source, host, port)

    async def run() -> None:
        await server.start()
        click.echo(f"serving {directory} (manifest {manifest}) at {server.location}", err=False)
        await server.serve_forever()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
