"""`RunClient`: every coordinator instruction as an async method, run lookups, and `watch`.

Methods take the signing wallet(s) explicitly; the fee payer is the signer unless `payer=` is given. A run
is named by its id (the RunIndex PDA ["run", id] finds its account) or by its account address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solana.rpc.models import DataSliceOpts
from solana.rpc.websocket_api import SolanaWsClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account

from .abi import coordinator as abi
from .coordinator_core import load_idl
from .errors import (
    ConfigError,
    InsufficientFunds,
    ProgramError,
    RunExists,
    RunNotFound,
    TransactionFailed,
)
from .idl import Idl, IdlError
from .models import (
    CheckFailure,
    Checkpoint,
    Progress,
    Run,
    RunState,
    WalletPoints,
    WitnessRecord,
    to_idl,
)
from .rpc import Rpc, pack_instructions
from .run_config import RunFile
from .statements import (
    decode_endpoint,
    ed25519_instruction,
    ed25519_verify_instruction,
    encode_endpoint,
    join_proof_message,
    result_statement,
)
from .wallet import sol

log = logging.getLogger("cohort.sdk.client")

CLOSED_READS = 3  # answers in a row without the Run account before watch says the run is closed
# a follower's read of the account that has not answered in READ_DEADLINE seconds is asked again (up to
# READ_TRIES times): over a lossy long path one connection's loss recovery held a 60 KB read, and with it
# a member's view of the run, for 15 s, and the seats dropped the member as late
READ_DEADLINE = 5.0
READ_TRIES = 3

FEE_ALLOWANCE = 100_000  # lamports set aside for a few transaction fees (5,000 each)


@dataclass(frozen=True)
class SignedResult:
    """A trainer's signed statement about one result (what it gossips with each Result): the material of
    an equivocation proof when two of them disagree."""

    epoch: int  # the epoch's number (Run.epoch_number): a statement names its epoch
    step: int
    batch: tuple[int, int]
    commitment: bytes
    signature: bytes  # by the trainer's node key over statements.result_statement(...)


class RunClient:
    """Drive runs of one deployed coordinator program."""

    def __init__(
        self, rpc: Rpc, program_id: Pubkey, *, ws_url: str | None = None, idl: Idl | None = None
    ) -> None:
        self.rpc = rpc
        self.program_id = program_id
        self.ws_url = ws_url
        self.idl = idl or load_idl()
        if rpc.idl is None:
            rpc.idl = self.idl

    # -- addresses ------------------------------------------------------------------------------------
    def run_index_address(self, run_id: str | bytes) -> Pubkey:
        seed = run_id.encode() if isinstance(run_id, str) else run_id
        return Pubkey.find_program_address([b"run", seed], self.program_id)[0]

    def join_authorization_address(self, run: Pubkey, grantee: Pubkey) -> Pubkey:
        return Pubkey.find_program_address([b"join", bytes(run), bytes(grantee)], self.program_id)[
            0
        ]

    def points_address(self, run: Pubkey, wallet: Pubkey) -> Pubkey:
        return Pubkey.find_program_address([b"points", bytes(run), bytes(wallet)], self.program_id)[
            0
        ]

    def endpoint_address(self, run: Pubkey, wallet: Pubkey) -> Pubkey:
        return Pubkey.find_program_address(
            [b"endpoint", bytes(run), bytes(wallet)], self.program_id
        )[0]

    async def resolve(self, run: str | Pubkey) -> Pubkey:
        """A run's account address from its id or address; RunNotFound when there is no such run."""
        if isinstance(run, Pubkey):
            return run
        if not run or len(run.encode()) > 32:
            raise RunNotFound(f"{run!r} is not a run id (1 to 32 bytes)")
        index = await self.rpc.account_owner_and_data(self.run_index_address(run))
        if index is not None and index[0] == self.program_id:
            with contextlib.suppress(IdlError):
                return self.idl.decode_account("RunIndex", index[1])["run"]
        with contextlib.suppress(ValueError):
            address = Pubkey.from_string(run)
            found = await self.rpc.account_owner_and_data(address)
            if found is not None and found[1][:8] == self.idl.accounts["Run"]:
                return address
        raise RunNotFound(f"no run {run!r} on this cluster (program {self.program_id})")

    # -- reads ----------------------------------------------------------------------------------------
    async def fetch_run(self, run: str | Pubkey) -> Run:
        address = await self.resolve(run)
        found = await self.rpc.account_owner_and_data(address)
        if found is None or found[0] != self.program_id or found[1][:8] != self.idl.accounts["Run"]:
            raise RunNotFound(
                f"no run at {address} (closed, or not a run of program {self.program_id})"
            )
        return Run.decode(address, found[1], self.idl)

    async def list_runs(self) -> list[Run]:
        """Every run of the program (getProgramAccounts filtered by the Run discriminator and size)."""
        accounts = await self.rpc.program_accounts(
            self.program_id,
            discriminator=self.idl.accounts["Run"],
            size=self.idl.account_size("Run"),
        )
        runs = [Run.decode(address, data, self.idl) for address, data in accounts]
        return sorted(runs, key=lambda r: r.run_id)

    # -- sending --------------------------------------------------------------------------------------
    def instruction(self, name: str, accounts: dict[str, Pubkey], args: dict | None = None):
        return self.idl.instruction(name, accounts, args, program_id=self.program_id)

    async def _send(self, instructions: list, signer: Keypair, others: Sequence[Keypair] = (),
                    payer: Keypair | None = None) -> Any:  # fmt: skip
        payer = payer or signer
        return await self.rpc.send(instructions, payer, [signer, *others])

    async def _as_authority(self, name: str, authority: Keypair, run: str | Pubkey, args: dict | None,
                            payer: Keypair | None = None) -> Any:  # fmt: skip
        address = await self.resolve(run)
        ix = self.instruction(name, {"authority": authority.pubkey(), "run": address}, args)
        return await self._send([ix], authority, payer=payer)

    async def _as_user(self, name: str, user: Keypair, run: str | Pubkey, args: dict | None = None,
                       payer: Keypair | None = None, **accounts: Pubkey) -> Any:  # fmt: skip
        address = await self.resolve(run)
        ix = self.instruction(name, {"user": user.pubkey(), "run": address, **accounts}, args)
        return await self._send([ix], user, payer=payer)

    async def require_funds(self, wallet: Pubkey, lamports: int, what: str) -> None:
        balance = await self.rpc.balance(wallet)
        if balance < lamports:
            raise InsufficientFunds(
                f"wallet {wallet} holds {sol(balance)}; {what} needs about {sol(lamports)} "
                "(fund it, e.g. `cohort wallet airdrop`)"
            )

    # -- the authority's instructions -----------------------------------------------------------------
    async def create_run(
        self, authority: Keypair, run_file: RunFile, *, open_run: bool = True,
        join_authority: Pubkey | None = None, payer: Keypair | None = None, run_account: Keypair | None = None,
    ) -> Pubkey:  # fmt: skip
        """Create the Run account and its RunIndex in one transaction, then configure it and (by default)
        open it for members. The config must already be validated (load_run_file does).

        Resumable: when an earlier create of this authority stopped part way (the run exists but was never
        opened), the run is configured and opened instead of being refused as existing. `run_account`: the
        Run's keypair when its address must be known first (a join authority derived from it)."""
        payer = payer or authority
        unfinished = await self._unfinished_run(authority.pubkey(), run_file.run_id)
        if unfinished is not None:
            log.info("run %s exists but was never opened: completing it", run_file.run_id)
            await self.configure(
                authority, unfinished, run_file, progress=run_file.progress, payer=payer
            )
            if open_run:
                await self.set_paused(authority, unfinished, False, payer=payer)
            return unfinished
        index = self.run_index_address(run_file.run_id)
        size = self.idl.account_size("Run")
        rent = await self.rpc.rent_exempt(size)
        index_rent = await self.rpc.rent_exempt(self.idl.account_size("RunIndex"))
        await self.require_funds(
            payer.pubkey(), rent + index_rent + FEE_ALLOWANCE, "creating a run"
        )
        run = run_account or Keypair()
        create = create_account(
            CreateAccountParams(from_pubkey=payer.pubkey(), to_pubkey=run.pubkey(), lamports=rent,
                                space=size, owner=self.program_id)
        )  # fmt: skip
        init = self.instruction(
            "initialize_run",
            {"payer": payer.pubkey(), "authority": authority.pubkey(), "run": run.pubkey(),
             "run_index": index},
            {"run_id": run_file.run_id.encode(), "join_authority": join_authority or authority.pubkey()},
        )  # fmt: skip
        await self.rpc.send([create, init], payer, [authority, run])
        await self.configure(
            authority, run.pubkey(), run_file, progress=run_file.progress, payer=payer
        )
        if open_run:
            await self.set_paused(authority, run.pubkey(), False, payer=payer)
        return run.pubkey()

    async def _unfinished_run(self, authority: Pubkey, run_id: str) -> Pubkey | None:
        """The run `run_id` when it exists, is this authority's and was never opened; None when there is no
        such run; RunExists when it is someone else's or already live."""
        if await self.rpc.account_data(self.run_index_address(run_id)) is None:
            return None
        try:
            state = await self.fetch_run(run_id)
        except RunNotFound:
            raise RunExists(
                f"the id {run_id!r} is taken on this cluster (its run is gone)"
            ) from None
        if state.authority != authority:
            raise RunExists(
                f"a run with id {run_id!r} already exists on this cluster (authority {state.authority})"
            )
        if state.state != RunState.Uninitialized:
            raise RunExists(f"run {run_id!r} already exists and is {state.state}: "
                            "change it with `cohort run update` (while paused)")  # fmt: skip
        return state.address

    async def configure(
        self, authority: Keypair, run: str | Pubkey, run_file: RunFile, *,
        progress: Progress | None = None, payer: Keypair | None = None,
    ) -> int:  # fmt: skip
        """Send config (with `progress`, default: the run's current one), model, metadata, checkpointers —
        only the parts that differ from the run's (the program refuses a no-op as NoChange), so a create cut
        off half way resumes where it stopped. Returns how many transactions were sent.

        The parts go in as few transactions as fit a packet (each one all or nothing), and the parts the
        program accepts only while halted go first, so a refused update changes nothing."""
        state = await self.fetch_run(run)
        progress = progress or state.progress
        padded = self._padded_checkpointers
        parts = [
            ("update_config", {"config": to_idl(run_file.config), "progress": to_idl(progress)},
             self._same("RunConfig", run_file.config, state.config)
             and self._same("Progress", progress, state.progress)),
            ("update_model", {"model": to_idl(run_file.model)},
             self._same("ModelConfig", run_file.model, state.model)),
            ("update_metadata", {"metadata": to_idl(run_file.metadata)},
             self._same("RunMetadata", run_file.metadata, state.metadata)),
            ("set_checkpointers", {"checkpointers": padded(run_file.checkpointers)},
             padded(run_file.checkpointers) == padded(state.checkpointers)),
        ]  # fmt: skip
        accounts = {"authority": authority.pubkey(), "run": state.address}
        changed = [self.instruction(name, accounts, args) for name, args, same in parts if not same]
        groups = pack_instructions(changed, (payer or authority).pubkey())
        for group in groups:
            await self._send(group, authority, payer=payer)
        return len(groups)

    def _same(self, type_name: str, a: Any, b: Any) -> bool:
        """Equal as the chain stores them (f32 fields compared after rounding, text after padding)."""
        type_ = {"defined": {"name": type_name}}
        return self.idl.encode(type_, to_idl(a)) == self.idl.encode(type_, to_idl(b))

    def _padded_checkpointers(self, keys: Sequence[Pubkey]) -> list[Pubkey]:
        return list(keys) + [Pubkey.default()] * (
            self.idl.constants["MAX_CHECKPOINTERS"] - len(keys)
        )

    async def update_run(self, authority: Keypair, run: str | Pubkey, run_file: RunFile,
                         payer: Keypair | None = None) -> int:  # fmt: skip
        """Apply a run config file to an existing run (the program allows it only while halted). A file
        written for another run (its [run].id differs) is refused before anything is sent."""
        state = await self.fetch_run(run)
        if state.run_id != run_file.run_id:
            where = f"{run_file.path}: " if run_file.path else ""
            raise ConfigError(f"{where}[run].id is {run_file.run_id!r} but the run is {state.run_id!r}: "
                              "is this the config of another run?")  # fmt: skip
        return await self.configure(authority, state.address, run_file, payer=payer)

    async def update_metadata(self, authority: Keypair, run: str | Pubkey, run_file: RunFile,
                              payer: Keypair | None = None) -> Any:  # fmt: skip
        return await self._as_authority("update_metadata", authority, run, {"metadata": to_idl(run_file.metadata)}, payer)  # fmt: skip

    async def set_paused(self, authority: Keypair, run: str | Pubkey, paused: bool,
                         payer: Keypair | None = None) -> Any:  # fmt: skip
        accounts = abi.SetPausedAccounts(authority=authority.pubkey(), run=await self.resolve(run))
        ix = abi.set_paused(self.program_id, accounts, abi.SetPausedArgs(paused=paused))
        return await self._send([ix], authority, payer=payer)

    async def set_join_authorization(self, join_authority: Keypair, run: str | Pubkey, grantee: Pubkey,
                                     allowed: bool = True) -> Any:  # fmt: skip
        address = await self.resolve(run)
        accounts = abi.SetJoinAuthorizationAccounts(
            join_authority=join_authority.pubkey(), run=address,
            authorization=self.join_authorization_address(address, grantee),
        )  # fmt: skip
        args = abi.SetJoinAuthorizationArgs(grantee=grantee, allowed=allowed)
        return await self._send(
            [abi.set_join_authorization(self.program_id, accounts, args)], join_authority
        )

    async def close_join_authorization(self, join_authority: Keypair, run: str | Pubkey,
                                       grantee: Pubkey) -> Any:  # fmt: skip
        """Close the grantee's JoinAuthorization (revoking it, its pending join included) and refund its
        rent to the join authority."""
        address = await self.resolve(run)
        ix = self.instruction(
            "close_join_authorization",
            {"join_authority": join_authority.pubkey(), "run": address,
             "authorization": self.join_authorization_address(address, grantee)},
        )  # fmt: skip
        return await self._send([ix], join_authority)

    async def close_run(self, authority: Keypair, run: str | Pubkey, recipient: Pubkey | None = None,
                        payer: Keypair | None = None) -> Any:  # fmt: skip
        """Close a halted run, refunding both accounts' rent. Points nobody claimed yet are settled into
        their wallets' Points accounts first (the authority pays those accounts' rent): the program refuses
        to close a run that still holds points."""
        state = await self.fetch_run(run)
        owed = [e.signer for e in state.registry if e.earned]
        for wallet in owed:
            await self.settle_points(payer or authority, state.address, wallet)
        ix = self.instruction(
            "close_run",
            {"authority": authority.pubkey(), "run": state.address,
             "run_index": self.run_index_address(state.run_id),
             "recipient": recipient or authority.pubkey()},
        )  # fmt: skip
        return await self._send([ix], authority, payer=payer)

    async def settle_points(self, payer: Keypair, run: str | Pubkey, wallet: Pubkey) -> Any:
        """Move `wallet`'s unclaimed points into its Points account (anyone may; the payer funds the
        account if it is new). Afterwards the registry may reuse the wallet's entry when it is full."""
        address = await self.resolve(run)
        accounts = abi.SettlePointsAccounts(
            payer=payer.pubkey(), run=address, points=self.points_address(address, wallet)
        )
        ix = abi.settle_points(self.program_id, accounts, abi.SettlePointsArgs(wallet=wallet))
        return await self._send([ix], payer)

    async def close_points(self, wallet: Keypair, run: Pubkey) -> Any:
        """Close the wallet's Points account of a run that was closed, refunding its rent."""
        accounts = abi.ClosePointsAccounts(
            wallet=wallet.pubkey(), points=self.points_address(run, wallet.pubkey()), run=run
        )
        return await self._send([abi.close_points(self.program_id, accounts)], wallet)

    async def close_endpoint(self, wallet: Keypair, run: Pubkey) -> Any:
        """Close the wallet's Endpoint account that exit_run did not (the run was closed, or no longer
        registers the wallet), refunding its rent."""
        ix = self.instruction(
            "close_endpoint",
            {
                "wallet": wallet.pubkey(),
                "endpoint": self.endpoint_address(run, wallet.pubkey()),
                "run": run,
            },
        )
        return await self._send([ix], wallet)

    # -- the clients' instructions --------------------------------------------------------------------
    async def join_run(self, user: Keypair, run: str | Pubkey, node_key: Keypair, endpoint: str = "",
                       payer: Keypair | None = None, throughput: int = 0) -> Any:  # fmt: skip
        """Join the next epoch as the node `node_key` (a Keypair from the node's 32-byte Ed25519 seed; its
        public key is the node id), reachable at `endpoint` (printable ASCII: kept in the wallet's Endpoint
        account, where peers read it, and published in ClientJoined). The node key signs (run, wallet,
        join marker) in an Ed25519 instruction before the join, which proves it belongs to this wallet for
        this joining window. `throughput` (tokens/s the node trains at; 0 = unknown) sets its share of the
        next epoch's batches. For Authorized runs the wallet's JoinAuthorization is passed along."""
        raw_endpoint = encode_endpoint(endpoint, self.idl.constants["ENDPOINT_LEN"])
        state = await self.fetch_run(run)
        address = state.address
        authorization = self.join_authorization_address(address, user.pubkey())
        if await self.rpc.account_data(authorization) is None:
            authorization = address  # Open runs ignore it; Authorized ones reject the join by name
        marker = self.idl.decode_account("Run", state.data)["next_active"]
        proof = ed25519_instruction(
            node_key, join_proof_message(self.idl, address, user.pubkey(), marker)
        )
        join = self.instruction(
            "join_run",
            {"user": user.pubkey(), "run": address, "authorization": authorization,
             "endpoint": self.endpoint_address(address, user.pubkey())},
            {"p2p_identity": node_key.pubkey(), "endpoint": raw_endpoint, "throughput": max(0, min(throughput, 2**32 - 1))},
        )  # fmt: skip
        return await self._send([proof, join], user, payer=payer)

    async def endpoints(self, run: Run) -> dict[Pubkey, str]:
        """Node id -> endpoint of every member of the run's epoch, from their Endpoint accounts (one
        getMultipleAccounts per 100 members). Only accounts this program owns count, and only the endpoint
        written by the member's join with the node id it is in the epoch with."""
        wallets = [c.signer for c in run.clients]
        found = await self.rpc.multiple_accounts(
            [self.endpoint_address(run.address, w) for w in wallets]
        )
        out: dict[Pubkey, str] = {}
        size = self.idl.account_size("Endpoint")
        for client, account in zip(run.clients, found, strict=True):
            if account is None or account[0] != self.program_id or len(account[1]) != size:
                continue
            with contextlib.suppress(IdlError):
                record = self.idl.decode_account("Endpoint", account[1])
                if record["run"] == run.address and record["wallet"] == client.signer and \
                        record["p2p_identity"] == client.p2p_identity:  # fmt: skip
                    out[client.p2p_identity] = decode_endpoint(record["endpoint"])
        return out

    async def exit_run(self, user: Keypair, run: str | Pubkey, payer: Keypair | None = None) -> Any:
        """Leave the run; unclaimed points move to the wallet's Points account (the wallet pays its rent
        when it is created) and its Endpoint account is closed."""
        address = await self.resolve(run)
        return await self._as_user("exit_run", user, address, payer=payer,
                                   points=self.points_address(address, user.pubkey()),
                                   endpoint=self.endpoint_address(address, user.pubkey()))  # fmt: skip

    async def claim_points(
        self, user: Keypair, run: str | Pubkey, payer: Keypair | None = None
    ) -> Any:
        """Move the wallet's unclaimed points into its Points account, where pruning cannot reach them."""
        address = await self.resolve(run)
        return await self._as_user("claim_points", user, address, payer=payer,
                                   points=self.points_address(address, user.pubkey()))  # fmt: skip

    async def points(self, run: str | Pubkey, wallet: Pubkey | None = None) -> list[WalletPoints]:
        """Points per wallet: claimed (its Points account) and unclaimed (its registry entry), for one
        wallet or for every wallet with either, largest total first."""
        state = await self.fetch_run(run)
        unclaimed = {e.signer: e.earned for e in state.registry}
        claimed: dict[Pubkey, int] = {}
        if wallet is not None:
            found = await self.rpc.account_owner_and_data(
                self.points_address(state.address, wallet)
            )
            if found is not None and found[0] == self.program_id:
                with contextlib.suppress(IdlError):
                    claimed[wallet] = self.idl.decode_account("Points", found[1])["points"]
            wallets = [wallet]
        else:
            accounts = await self.rpc.program_accounts(
                self.program_id,
                discriminator=self.idl.accounts["Points"],
                size=self.idl.account_size("Points"),
            )
            for _, data in accounts:
                with contextlib.suppress(IdlError):
                    decoded = self.idl.decode_account("Points", data)
                    if decoded["run"] == state.address:
                        claimed[decoded["wallet"]] = decoded["points"]
            wallets = [w for w in {**unclaimed, **claimed} if unclaimed.get(w) or claimed.get(w)]
        rows = [WalletPoints(w, claimed.get(w, 0), unclaimed.get(w, 0)) for w in wallets]
        return sorted(rows, key=lambda r: (-r.total, str(r.wallet)))

    async def tick(self, user: Keypair, run: str | Pubkey, payer: Keypair | None = None) -> Any:
        return await self._as_user("tick", user, run, payer=payer)

    async def start_pending_round(self, user: Keypair, run: str | Pubkey, attempts: int = 50,
                                  retry_delay: float = 0.1) -> Any:  # fmt: skip
        """When the next round's inputs are frozen (Run.seed_pending), tick until it starts. Its seed is
        the hash of the slot they froze in, so a tick in that same slot is refused (SeedPending) and is
        retried every `retry_delay` seconds, at most `attempts` times. Returns the starting tick's
        signature, or None when no round was pending."""
        if not (await self.fetch_run(run)).seed_pending:
            return None
        for _ in range(attempts):
            try:
                return await self.tick(user, run)
            except ProgramError as e:
                if e.name != "SeedPending":
                    raise
            await asyncio.sleep(retry_delay)
        raise TransactionFailed(f"the pending round of {run} did not start after {attempts} ticks")

    async def warmup_witness(self, user: Keypair, run: str | Pubkey, index: int,
                             payer: Keypair | None = None) -> Any:  # fmt: skip
        accounts = abi.WarmupWitnessAccounts(user=user.pubkey(), run=await self.resolve(run))
        ix = abi.warmup_witness(self.program_id, accounts, abi.WarmupWitnessArgs(index=index))
        return await self._send([ix], user, payer=payer)

    async def witness(self, user: Keypair, run: str | Pubkey, args: abi.WitnessArgs | Mapping[str, Any],
                      payer: Keypair | None = None) -> Any:  # fmt: skip
        """`args`: step, index, position (its seat), participants (32-byte bitmap), results_root (32
        bytes), weights_digest (u64) and metadata (loss, tokens_per_sec, bytes_sent, bytes_received,
        eval_loss, eval_tokens): an `abi.WitnessArgs`, or a mapping of those names."""
        accounts = abi.WitnessAccounts(user=user.pubkey(), run=await self.resolve(run))
        ix = abi.witness(self.program_id, accounts, witness_args(args))
        return await self._send([ix], user, payer=payer)

    async def vote_weights(self, user: Keypair, run: str | Pubkey, index: int, step: int, manifest: bytes,
                           payer: Keypair | None = None) -> Any:  # fmt: skip
        """As a finisher of the epoch that ended at `step`, report the manifest hash of our checkpoint."""
        accounts = abi.VoteWeightsAccounts(user=user.pubkey(), run=await self.resolve(run))
        args = abi.VoteWeightsArgs(index=index, step=step, manifest=manifest)
        return await self._send(
            [abi.vote_weights(self.program_id, accounts, args)], user, payer=payer
        )

    async def report_equivocation(self, user: Keypair, run: Pubkey, index: int, node_id: Pubkey,
                                  first: SignedResult, second: SignedResult) -> Any:  # fmt: skip
        """Prove that epoch client `index` (node `node_id`) signed two different results for one step of the
        current epoch: the chain convicts it (dropped, its unclaimed points forfeited)."""
        same_step = first.step == second.step and first.epoch == second.epoch
        if not same_step or first.commitment == second.commitment:
            raise ValueError(
                "an equivocation is two signed results of one step with different commitments"
            )
        checks = [
            ed25519_verify_instruction(bytes(node_id), r.signature,
                                       result_statement(self.idl, run, r.epoch, r.step, r.batch, r.commitment))
            for r in (first, second)
        ]  # fmt: skip

        def statement(r: SignedResult) -> dict[str, Any]:
            return {"batch_start": r.batch[0], "batch_end": r.batch[1], "commitment": r.commitment}

        ix = self.instruction(
            "report_equivocation",
            {"user": user.pubkey(), "run": run},
            {
                "index": index,
                "step": first.step,
                "first": statement(first),
                "second": statement(second),
            },
        )
        return await self._send([*checks, ix], user)

    async def report_check(self, user: Keypair, run: str | Pubkey, step: int, trainer: int,
                           reason: CheckFailure | str, payer: Keypair | None = None) -> Any:  # fmt: skip
        """As one of the verifiers the chain drew for trainer `trainer`'s (epoch index) result of `step`
        (`CoordinatorCore.check_plan`), report that the check failed, and why; a strict majority of the
        check's verifiers opens a dispute. As a member of that dispute's committee
        (`CoordinatorCore.dispute_committee`), report Passed or the failure the same check found: a strict
        majority of the committee convicts the trainer (FailedVerification) or refutes the check."""
        accounts = abi.ReportCheckAccounts(user=user.pubkey(), run=await self.resolve(run))
        args = abi.ReportCheckArgs(step=step, trainer=trainer, reason=str(CheckFailure(reason)))
        return await self._send(
            [abi.report_check(self.program_id, accounts, args)], user, payer=payer
        )

    async def health_check(self, user: Keypair, run: str | Pubkey, step: int, indices: Sequence[int],
                           payer: Keypair | None = None) -> Any:  # fmt: skip
        """Report trainers of `step` that the witnesses of the round after it did not see (that round must be
        over and still stored: the chain keeps NUM_ROUNDS rounds); the chain drops them, or none."""
        if not 1 <= len(indices) <= 32:
            raise ValueError(f"a health check names 1 to 32 clients, got {len(indices)}")
        padded = list(indices) + [0] * (32 - len(indices))
        args = {"step": step, "count": len(indices), "indices": padded}
        return await self._as_user("health_check", user, run, args, payer)

    async def checkpoint(self, user: Keypair, run: str | Pubkey, checkpoint: Checkpoint,
                         payer: Keypair | None = None) -> Any:  # fmt: skip
        return await self._as_user(
            "checkpoint", user, run, {"checkpoint": to_idl(checkpoint)}, payer
        )

    # -- following a run ------------------------------------------------------------------------------
    def hot_length(self) -> int:
        """Bytes of a Run account's hot prefix (discriminator included): phase, step, seeds and the stored
        rounds' summaries, everything that changes from round to round."""
        return 8 + self.idl.offset_of("Run", "witnesses")

    async def watch(
        self, run: str | Pubkey, *, poll_interval: float = 2.0, max_reconnect_delay: float = 30.0,
        hot: bool = False,
    ) -> AsyncIterator[Run]:  # fmt: skip
        """Yield the run's state now and after every change, until the run is closed.

        Changes arrive over a websocket accountSubscribe; when the socket fails the account is polled every
        `poll_interval` seconds while reconnecting with backoff. Updates whose nonce is not newer than the
        last one yielded (reordered or replayed notifications, polls racing the socket) are dropped.

        With `hot=True` only the account's hot prefix (`hot_length()` bytes: about 1 KB of the ~60 KB) is
        sent on each change (dataSlice); the rest is read again only when it can have changed for a
        follower: the members nonce moved, or the phase is not a round (joins, votes, the authority's
        changes). Runs built from a fresh hot prefix leave the rounds' witness records out
        (`Run.fresh_records` is False; `round_records` reads them).
        """
        address = await self.resolve(run)
        follower = _Follower(self, address, hot)
        delay = 0.5
        state = await follower.poll()
        if state is _CLOSED:
            return
        follower.fresh(state)
        yield state
        while True:
            try:
                async with SolanaWsClient(self.ws_url or "", request_timeout=10) as ws:
                    await ws.account_subscribe(pubkey=address, encoding="base64", commitment=self.rpc.commitment,
                                               data_slice=follower.slice)  # fmt: skip
                    delay = 0.5
                    state = await follower.poll()  # what changed while we subscribed
                    if state is _CLOSED:
                        return
                    if follower.fresh(state):
                        yield state
                    while True:
                        try:
                            note = await asyncio.wait_for(ws.recv(), poll_interval * 5)
                        except TimeoutError:
                            state = await follower.poll()  # a quiet socket: check it missed nothing
                        else:
                            state = await follower.from_notification(note)
                        if state is _CLOSED:
                            return
                        if follower.fresh(state):
                            yield state
            except (OSError, TimeoutError, RuntimeError) as exc:
                log.info("watch %s: websocket unavailable (%s); polling", address, exc)
            except Exception as exc:  # websockets' ConnectionClosed and friends
                if not type(exc).__module__.startswith("websockets"):
                    raise
                log.info("watch %s: websocket closed (%s); polling", address, exc)
            # polling fallback until the next reconnect attempt
            until = asyncio.get_running_loop().time() + delay
            while True:
                state = await follower.poll()
                if state is _CLOSED:
                    return
                if follower.fresh(state):
                    yield state
                if asyncio.get_running_loop().time() >= until:
                    break
                await asyncio.sleep(min(poll_interval, delay))
            delay = min(delay * 2, max_reconnect_delay)

    async def round_records(self, run: Run, back: int = 0) -> tuple[WitnessRecord, ...]:
        """The witness records of the round `back` rounds before the current one, read alone (dataSlice of
        its ring slot, ~2.5 KB): for a Run followed by its hot prefix."""
        rounds = run.rounds
        if back >= len(rounds):
            return ()
        head = self.idl.decode_account_reusing("Run", run.data)["epoch"]["rounds_head"]
        count = self.idl.constants["NUM_ROUNDS"]
        size = self.idl.size_of({"defined": {"name": "RoundWitnesses"}})
        offset = 8 + self.idl.offset_of("Run", "witnesses") + (head + count - back) % count * size
        found = await self.rpc.account_slice(run.address, offset, size)
        if found is None or found[0] != self.program_id or len(found[1]) != size:
            return ()
        value, _ = self.idl.decode({"defined": {"name": "RoundWitnesses"}}, found[1])
        return tuple(
            WitnessRecord(w["index"], w["position"], bytes(w["participants"]), bytes(w["results_root"]),
                          w["weights_digest"])
            for w in value["records"][: rounds[back].witnesses_len]
        )  # fmt: skip


class _Follower:
    """What `watch` knows of one run: the last full copy, and how to make a Run of a fresh hot prefix."""

    def __init__(self, chain: RunClient, address: Pubkey, hot: bool) -> None:
        self.chain, self.address, self.hot = chain, address, hot
        self.length = chain.hot_length()
        self.slice = DataSliceOpts(offset=0, length=self.length) if hot else None
        self.full: Run | None = None  # the last full read
        self.last = -1  # nonce of the last Run yielded

    def fresh(self, state: Run | None) -> bool:
        if state is None or state.nonce <= self.last:
            return False
        self.last = state.nonce
        return True

    async def poll(self) -> Any:
        if self.hot and self.full is not None:
            found = await self._ask(
                lambda: self.chain.rpc.account_slice(self.address, 0, self.length)
            )
            return await self._from_hot(found[1] if found is not None else None, 1 if found else 0)
        return await self._read_full()

    @staticmethod
    async def _ask(read: Callable[[], Awaitable[Any]]) -> Any:
        """`read()`, asked anew (a new request, so a new connection) when one stalls past READ_DEADLINE."""
        for _ in range(READ_TRIES - 1):
            try:
                return await asyncio.wait_for(read(), READ_DEADLINE)
            except TimeoutError:
                continue
        return await asyncio.wait_for(read(), READ_DEADLINE)

    async def _read_full(self) -> Any:
        """The whole account. "Closed" takes CLOSED_READS answers in a row without it, a second apart: one
        empty answer from a lagging or fallback RPC node is not the end of a run."""
        for attempt in range(CLOSED_READS):
            found = await self._ask(lambda: self.chain.rpc.account_owner_and_data(self.address))
            if found is not None and found[1][:8] == self.chain.idl.accounts["Run"]:
                self.full = Run.decode(self.address, found[1], self.chain.idl)
                return self.full
            if attempt + 1 < CLOSED_READS:
                await asyncio.sleep(1.0)
        return _CLOSED

    async def from_notification(self, note: Any) -> Any:
        value = getattr(getattr(note, "result", None), "value", None)
        if value is None:
            return None
        if not self.hot:
            data = bytes(value.data)
            if value.lamports == 0 or data[:8] != self.chain.idl.accounts["Run"]:
                return await self._read_full()  # closed only if reads agree
            return Run.decode(self.address, data, self.chain.idl)
        return await self._from_hot(bytes(value.data), value.lamports)

    async def _from_hot(self, prefix: bytes | None, lamports: int) -> Any:
        """A Run from a fresh hot prefix and the last full copy, or a new full read when the rest may
        have changed for a follower (a gone account is confirmed by a full read, never one slice)."""
        idl, full = self.chain.idl, self.full
        if (
            prefix is None
            or lamports == 0
            or len(prefix) != self.length
            or prefix[:8] != idl.accounts["Run"]
        ):
            return await self._read_full()
        if full is None:
            return await self._read_full()
        state = Run.decode(
            self.address, prefix + full.data[self.length :], idl, fresh_records=False
        )
        if state.nonce <= self.last:
            # a notification older than what was yielded (queued behind a slow read): dropped unread, or
            # over a slow link a backlog of them costs a full read each and the view falls further behind
            return None
        return await self._read_full() if rest_is_stale(full, state) else state


def rest_is_stale(full: Run, state: Run) -> bool:
    """Whether what lies past the hot prefix may have changed since `full` was read, as `state` (a fresh hot
    prefix over `full`'s rest) shows: the member list moved, a phase outside the rounds, a new epoch; or a seed
    an open dispute's committee is drawn from (kept outside the prefix, with the members then) was revealed
    after `full` was read. A round's seed is revealed when the round before it starts: a full read made while
    a round waited for its seed (`seed_pending`) has not got that round's next one."""
    rounds = (RunState.RoundTrain, RunState.RoundWitness)
    if (state.members_nonce != full.members_nonce or state.state not in rounds or full.state not in rounds
            or state.progress.epoch != full.progress.epoch):  # fmt: skip
        return True
    known, newest = full.newest_seed_step, state.newest_seed_step
    return any(known < seed_step <= newest for _, _, seed_step in full.disputes)


_CLOSED: Any = object()  # the run's account is gone


def witness_args(args: abi.WitnessArgs | Mapping[str, Any]) -> abi.WitnessArgs:
    """A witness's arguments, typed: given as they are, or from a mapping of their names (metadata too)."""
    if isinstance(args, abi.WitnessArgs):
        return args
    fields = dict(args)
    metadata = fields.pop("metadata")
    if not isinstance(metadata, abi.WitnessMetadata):
        metadata = abi.WitnessMetadata(**metadata)
    try:
        return abi.WitnessArgs(**fields, metadata=metadata)
    except TypeError as e:  # a missing or unknown name
        raise IdlError(f"witness: {e}") from None
