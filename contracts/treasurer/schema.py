"""The treasurer's ABI — the one source of truth for its accounts, instructions, events and errors.

The treasurer escrows one SPL token (classic SPL Token or Token-2022) per run in a vault owned by a PDA,
and pays each member `points × reward_per_point` base units for the points the coordinator settled into
the member's Points account, to whatever token account the member's registered claim key names. It reads
the coordinator's Run and Points accounts; their layouts come from the coordinator's own schema (below), so
a coordinator layout change makes `codegen --check` fail here instead of silently misreading.
"""

from __future__ import annotations

from pathlib import Path

from cohort.sbf.abi.layout import discriminator, layout
from cohort.sbf.abi.loaded import load_schema
from cohort.sbf.abi.schema import (
    I64,
    PUBKEY,
    U8,
    U16,
    U64,
    Account,
    Bytes,
    Enum,
    Error,
    F,
    Instruction,
    ProgramAbi,
    S,
)

# --------------------------------------------------------------------------------------------------
# what the treasurer reads of the coordinator's accounts, from the coordinator's schema

_coordinator = load_schema(Path(__file__).resolve().parent.parent / "coordinator" / "schema.py")
_structs = {s.name: s for s in _coordinator.structs}
_run = layout(_coordinator, _structs["Run"])
_run_offsets = {f.name: offset for f, offset in _run.fields}
Points = _structs[
    "Points"
]  # the coordinator's Points account body, laid out exactly as it lays it out


def _offset(struct: str, field: str) -> int:
    return dict((f.name, o) for f, o in layout(_coordinator, _structs[struct]).fields)[field]


def _size(struct: str) -> int:
    return layout(_coordinator, _structs[struct]).size


_client_states = next(e for e in _coordinator.enums if e.name == "ClientState").variants
_join_policies = next(e for e in _coordinator.enums if e.name == "JoinPolicy").variants

CONSTANTS: dict[str, int] = {
    "COORD_RUN_VERSION": _coordinator.constants[
        "VERSION"
    ],  # the Run layout version the offsets are of
    "COORD_RUN_SIZE": 8 + _run.size,  # discriminator + body
    "COORD_RUN_VERSION_OFFSET": 8 + _run_offsets["version"],
    "COORD_RUN_AUTHORITY_OFFSET": 8 + _run_offsets["authority"],
    "COORD_POINTS_SIZE": 8 + layout(_coordinator, Points).size,
    "COORD_RUN_DISCRIMINATOR": int.from_bytes(discriminator("account", "Run"), "little"),
    "COORD_POINTS_DISCRIMINATOR": int.from_bytes(discriminator("account", "Points"), "little"),
    # stakes: the join authority, the epoch's members and their states, the registry, the round times
    "COORD_RUN_JOIN_AUTHORITY_OFFSET": 8 + _run_offsets["join_authority"],
    "COORD_RUN_CLIENTS_LEN_OFFSET": 8
    + _run_offsets["epoch"]
    + _offset("EpochState", "clients_len"),
    "COORD_RUN_CLIENTS_OFFSET": 8 + _run_offsets["clients"],
    "COORD_CLIENT_SIZE": _size("Client"),
    "COORD_CLIENT_SIGNER_OFFSET": _offset("Client", "signer"),
    "COORD_CLIENT_STATE_OFFSET": _offset("Client", "state"),
    "COORD_CLIENT_CONVICTED": _client_states.index("Convicted"),
    "COORD_RUN_REGISTRY_OFFSET": 8 + _run_offsets["registry"],
    "COORD_RUN_REGISTRY_LEN_OFFSET": 8 + _run_offsets["registry_len"],
    "COORD_REGISTRY_ENTRY_SIZE": _size("RegistryEntry"),
    "COORD_REGISTRY_SIGNER_OFFSET": _offset("RegistryEntry", "signer"),
    "COORD_REGISTRY_BANNED_UNTIL_OFFSET": _offset("RegistryEntry", "banned_until"),
    "COORD_MAX_CLIENTS": _coordinator.constants["MAX_CLIENTS"],
    "COORD_RUN_EPOCH_TIME_OFFSET": 8 + _run_offsets["config"] + _offset("RunConfig", "epoch_time"),
    "COORD_RUN_COOLDOWN_TIME_OFFSET": 8
    + _run_offsets["config"]
    + _offset("RunConfig", "cooldown_time"),
    "COORD_RUN_ROUND_TRAIN_TIME_OFFSET": 8
    + _run_offsets["config"]
    + _offset("RunConfig", "max_round_train_time"),
    "COORD_RUN_ROUND_WITNESS_TIME_OFFSET": 8
    + _run_offsets["config"]
    + _offset("RunConfig", "round_witness_time"),
    "COORD_RUN_JOIN_POLICY_OFFSET": 8
    + _run_offsets["config"]
    + _offset("RunConfig", "join_policy"),
    "COORD_JOIN_POLICY_AUTHORIZED": _join_policies.index("Authorized"),
    "COORD_JOIN_AUTHORIZATION_SIZE": 8 + _size("JoinAuthorization"),
    "COORD_JOIN_AUTHORIZATION_GRANTEE_OFFSET": 8 + _offset("JoinAuthorization", "grantee"),
    # the two coordinator instructions the treasurer calls as a run's join authority
    "COORD_IX_SET_JOIN_AUTHORIZATION": int.from_bytes(
        discriminator("global", "set_join_authorization"), "little"
    ),
    "COORD_IX_CLOSE_JOIN_AUTHORIZATION": int.from_bytes(
        discriminator("global", "close_join_authorization"), "little"
    ),
    "COORD_SET_JOIN_AUTHORIZATION_ARGS_SIZE": _size("SetJoinAuthorizationArgs"),
}

SYSTEM_PROGRAM = "11111111111111111111111111111111"
TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
TOKEN_2022_PROGRAM = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb"

StakeState = Enum(
    "StakeState",
    ("Staked", "Unstaking", "Slashed"),
    "Staked: the wallet may join. Unstaking: it left and waits out unstake_delay. Slashed: a conviction took it.",
)
ENUMS = (StakeState,)

# --------------------------------------------------------------------------------------------------
# accounts

Treasury = S(
    "Treasury",
    F("bump", U8),
    F("vault_bump", U8),
    F("decimals", U8, "the mint's (transfer_checked states them)"),
    F(
        "joiner_bump",
        U8,
        'of the PDA ["joiner", treasury]: the run\'s join authority when stakes are required',
    ),
    F("_pad", Bytes(4)),
    F("run", PUBKEY, "the coordinator's Run account"),
    F(
        "coordinator",
        PUBKEY,
        "the program that owned the Run when the treasury was created: Points must be its",
    ),
    F(
        "authority",
        PUBKEY,
        "the run's authority when last seen (it may close the treasury after the claim window)",
    ),
    F(
        "payer",
        PUBKEY,
        "paid the rent of the treasury and its vault: it gets it back when they are closed",
    ),
    F("mint", PUBKEY),
    F("token_program", PUBKEY, "SPL Token or Token-2022: the mint's owner"),
    F("vault", PUBKEY, 'PDA ["vault", treasury]: the token account that holds the rewards'),
    F("reward_per_point", U64, "token base units per settled point; only ever raised"),
    F(
        "claim_window",
        I64,
        "seconds after the run's close is recorded during which claims stay open; then "
        "the authority may take the rest back and close the treasury",
    ),
    F("closed_at", I64, "unix time mark_run_closed saw the Run gone (0 = the run is live)"),
    F(
        "funded",
        U64,
        "base units deposited through fund (direct transfers to the vault are not counted)",
    ),
    F("claimed", U64, "base units paid out to members"),
    F(
        "stake_amount",
        U64,
        "base units of the mint a wallet stakes to be authorized to join (0 = no stakes)",
    ),
    F(
        "unstake_delay",
        I64,
        "seconds a wallet that left waits before it withdraws its stake (covers the checks "
        "still pending on its work: at least an epoch, its cooldown and a round)",
    ),
    F("stake_vault", PUBKEY, 'PDA ["stakes", treasury]: the token account holding the stakes'),
    F("slashed", U64, "base units slashed into the reward vault (the pool)"),
    F(
        "staked",
        U64,
        "base units the stake vault holds for live stakes (Staked or Unstaking): the treasury "
        "closes only once this is 0, so no stake is ever stranded",
    ),
    doc='PDA ["treasury", run]: one run\'s reward escrow and its rule.',
)
Stake = S(
    "Stake",
    F("bump", U8),
    F("state", StakeState),
    F("_pad", Bytes(6)),
    F("treasury", PUBKEY),
    F("wallet", PUBKEY),
    F("amount", U64, "base units held for this wallet"),
    F("unstake_at", I64, "when an Unstaking stake may be withdrawn"),
    doc='PDA ["stake", treasury, wallet]: a wallet\'s stake; while Staked the treasurer authorizes it to join.',
)
Member = S(
    "Member",
    F("bump", U8),
    F("_pad", Bytes(7)),
    F("treasury", PUBKEY),
    F("wallet", PUBKEY, "the member's wallet (whose coordinator Points are paid)"),
    F("claim_key", PUBKEY, "the only key that can claim: set once by the wallet, never changed"),
    F("claimed", U64, "base units paid to this member so far"),
    doc='PDA ["member", treasury, wallet]: a member\'s claim key and what it has been paid.',
)

# instruction arguments
InitTreasuryArgs = S(
    "InitTreasuryArgs",
    F("reward_per_point", U64, "token base units per settled point (> 0)"),
    F("claim_window", I64, "seconds claims stay open after the run is closed (>= 0)"),
)
SetRateArgs = S("SetRateArgs", F("reward_per_point", U64, "must be higher than the current rate"))
FundArgs = S("FundArgs", F("amount", U64))
RegisterClaimKeyArgs = S("RegisterClaimKeyArgs", F("claim_key", PUBKEY))
ClaimArgs = S("ClaimArgs", F("amount", U64, "base units, at most the entitlement not yet claimed"))
InitStakesArgs = S(
    "InitStakesArgs",
    F("stake_amount", U64, "base units each joining wallet stakes (> 0)"),
    F("unstake_delay", I64, "seconds; at least the run's epoch_time + cooldown_time + one round"),
)
SlashArgs = S("SlashArgs", F("index", U16, "the convicted wallet's index in the Run's epoch clients, or in its registry (a conviction's record)"),
              F("_pad", Bytes(6)))  # fmt: skip

# events (Anchor format: sha256("event:<Name>")[:8] + Borsh, in "Program data:" log lines)
Funded = S("Funded", F("treasury", PUBKEY), F("funder", PUBKEY), F("amount", U64), F("funded", U64))
RateRaised = S("RateRaised", F("treasury", PUBKEY), F("reward_per_point", U64))
RewardClaimed = S(
    "RewardClaimed",
    F("treasury", PUBKEY),
    F("wallet", PUBKEY),
    F("destination", PUBKEY),
    F("amount", U64),
    F("claimed", U64, "this member's total so far"),
    F("entitlement", U64, "points × reward_per_point at this claim"),
)

Slashed = S(
    "Slashed", F("treasury", PUBKEY), F("wallet", PUBKEY), F("reporter", PUBKEY), F("amount", U64)
)

ACCOUNT_TYPES = (Treasury, Member, Stake)
ARG_TYPES = (
    InitTreasuryArgs,
    SetRateArgs,
    FundArgs,
    RegisterClaimKeyArgs,
    ClaimArgs,
    InitStakesArgs,
    SlashArgs,
)
EVENTS = (Funded, RateRaised, RewardClaimed, Slashed)
STRUCTS = (Points, *ACCOUNT_TYPES, *ARG_TYPES, *EVENTS)

# --------------------------------------------------------------------------------------------------
# instructions

_treasury_w = Account("treasury", writable=True, doc='PDA ["treasury", run]')
_vault_w = Account("vault", writable=True, doc="the treasury's vault")
_mint = Account("mint", doc="the treasury's mint")
_token_program = Account(
    "token_program", doc="the treasury's token program (SPL Token or Token-2022)"
)

INSTRUCTIONS = (
    Instruction(
        "init_treasury",
        (
            Account("payer", writable=True, signer=True, doc="pays both accounts' rent"),
            Account("authority", signer=True, doc="the run's authority"),
            Account(
                "run",
                doc="the coordinator's Run account (its owner becomes the treasury's coordinator)",
            ),
            Account("treasury", writable=True, doc='PDA ["treasury", run]: created'),
            Account(
                "vault",
                writable=True,
                doc='PDA ["vault", treasury]: created as a token account of mint',
            ),
            Account("mint", doc="the reward token's mint"),
            Account("token_program", doc="the mint's owner: SPL Token or Token-2022"),
            Account("system_program", address=SYSTEM_PROGRAM),
        ),
        InitTreasuryArgs,
        "The run's authority creates the run's treasury and its vault and states the rule: a rate per settled "
        "point and how long claims stay open after the run closes.",
    ),
    Instruction(
        "fund",
        (
            Account("funder", signer=True, doc="anyone: the source's owner or delegate"),
            Account("source", writable=True, doc="a token account of the treasury's mint"),
            _treasury_w,
            _vault_w,
            _mint,
            _token_program,
        ),
        FundArgs,
        "Anyone deposits tokens into the run's vault (transfer_checked).",
    ),
    Instruction(
        "set_rate",
        (
            Account("authority", signer=True, doc="the run's authority"),
            Account("run", doc="the live Run account"),
            _treasury_w,
        ),
        SetRateArgs,
        "Raise the rate per point (never lower: an entitlement a member has seen never shrinks).",
    ),
    Instruction(
        "register_claim_key",
        (
            Account("wallet", writable=True, signer=True, doc="the member's wallet; pays the rent"),
            Account("treasury", doc='PDA ["treasury", run]'),
            Account("member", writable=True, doc='PDA ["member", treasury, wallet]: created'),
            Account("system_program", address=SYSTEM_PROGRAM),
        ),
        RegisterClaimKeyArgs,
        "The wallet names the key that will claim its rewards, once: a stolen hot wallet cannot redirect them.",
    ),
    Instruction(
        "claim",
        (
            Account("claim_key", signer=True, doc="the member's registered claim key"),
            _treasury_w,
            Account("member", writable=True, doc='PDA ["member", treasury, wallet]'),
            Account("points", doc="the coordinator's Points account of (run, wallet)"),
            _vault_w,
            Account("destination", writable=True, doc="any token account of the mint"),
            _mint,
            _token_program,
        ),
        ClaimArgs,
        "Pay up to points × reward_per_point − claimed, read from the coordinator's Points account; also "
        "after the run closed, until the claim window ends.",
    ),
    Instruction(
        "mark_run_closed",
        (_treasury_w, Account("run", doc="the treasury's run, now closed")),
        None,
        "Anyone records when the run was seen closed: the claim window starts.",
    ),
    Instruction(
        "close_treasury",
        (
            Account("authority", signer=True, doc="the treasury's authority"),
            _treasury_w,
            _vault_w,
            Account(
                "destination",
                writable=True,
                doc="a token account of the mint: receives the unclaimed rest",
            ),
            Account(
                "rent_recipient",
                writable=True,
                doc="the treasury's payer: receives the accounts' rent",
            ),
            Account(
                "stake_vault",
                writable=True,
                doc="the treasury's stake vault when stakes are on (closed with the treasury; what "
                "was sent to it beyond the stakes goes to the destination), else any account",
            ),
            _mint,
            _token_program,
        ),
        None,
        "After the claim window, once every stake was withdrawn or slashed: the unclaimed rest goes to the "
        "authority's destination, the vaults and the treasury are closed and their rent goes back to the "
        "treasury's payer.",
    ),
    Instruction(
        "close_member",
        (
            Account(
                "wallet", writable=True, signer=True, doc="the member's wallet; receives the rent"
            ),
            Account("member", writable=True, doc='PDA ["member", treasury, wallet]'),
            Account("treasury", doc="the member's treasury (or its closed address)"),
            Account("points", doc="the coordinator's Points address of (run, wallet)"),
        ),
        None,
        "Close a Member account once nothing more can be claimed with it: the treasury is closed, or the "
        "wallet's Points account is (claim first: closing Points ends the entitlement).",
    ),
)

_stake_w = Account("stake", writable=True, doc='PDA ["stake", treasury, wallet]')
_stake_vault_w = Account("stake_vault", writable=True, doc="the treasury's stake vault")
_run_w = Account(
    "run", writable=True, doc="the treasury's Run (the coordinator updates it: a pending join)"
)
_authorization_w = Account(
    "authorization",
    writable=True,
    doc='the coordinator\'s JoinAuthorization PDA ["join", run, wallet]',
)
_joiner_w = Account(
    "joiner", writable=True, doc='PDA ["joiner", treasury]: the run\'s join authority (no data)'
)
_coordinator_program = Account("coordinator_program", doc="the treasury's coordinator")
_system = Account("system_program", address=SYSTEM_PROGRAM)

INSTRUCTIONS = (
    *INSTRUCTIONS,
    Instruction(
        "init_stakes",
        (
            Account("payer", writable=True, signer=True, doc="pays the stake vault's rent"),
            Account("authority", signer=True, doc="the run's authority"),
            Account(
                "run", doc="the live Run: its join authority must be the treasury's joiner PDA"
            ),
            _treasury_w,
            Account("stake_vault", writable=True, doc='PDA ["stakes", treasury]: created'),
            _mint,
            _token_program,
            _system,
        ),
        InitStakesArgs,
        "Require a stake of the treasury's mint to join, once: the run's join authority must be the treasury's "
        "joiner PDA, which authorizes exactly the staked wallets.",
    ),
    Instruction(
        "stake",
        (
            Account("wallet", writable=True, signer=True, doc="stakes, pays the rents"),
            Account("source", writable=True, doc="the wallet's token account of the mint"),
            _treasury_w,
            Account("stake", writable=True, doc='PDA ["stake", treasury, wallet]: created'),
            _stake_vault_w,
            _mint,
            _token_program,
            _run_w,
            _authorization_w,
            _joiner_w,
            _coordinator_program,
            _system,
        ),
        None,
        "Stake stake_amount; the treasurer, as the run's join authority, authorizes the wallet to join.",
    ),
    Instruction(
        "unstake",
        (
            Account(
                "wallet", writable=True, signer=True, doc="receives the JoinAuthorization's rent"
            ),
            Account("treasury", doc='PDA ["treasury", run]'),
            _stake_w,
            _run_w,
            _authorization_w,
            _joiner_w,
            _coordinator_program,
            _system,
        ),
        None,
        "A wallet no longer in the run's registry (it exited, or the run closed) gives up its authorization to "
        "join; its stake can be withdrawn after unstake_delay.",
    ),
    Instruction(
        "withdraw_stake",
        (
            Account("wallet", writable=True, signer=True, doc="receives the Stake account's rent"),
            _treasury_w,
            _stake_w,
            _stake_vault_w,
            Account("destination", writable=True, doc="a token account of the mint"),
            _mint,
            _token_program,
        ),
        None,
        "After unstake_delay: the stake goes to the destination and the Stake account is closed (a slashed "
        "one is just closed).",
    ),
    Instruction(
        "slash",
        (
            Account(
                "reporter",
                writable=True,
                signer=True,
                doc="anyone; receives the JoinAuthorization's rent",
            ),
            _treasury_w,
            _stake_w,
            _run_w,
            _authorization_w,
            _joiner_w,
            _stake_vault_w,
            Account(
                "vault",
                writable=True,
                doc="the treasury's reward vault: slashed stakes go to the pool",
            ),
            _mint,
            _token_program,
            _coordinator_program,
            _system,
        ),
        SlashArgs,
        "Anyone: the Run shows the wallet convicted in this epoch (its client entry's state); its stake goes to "
        "the reward pool and its authorization to join ends.",
    ),
)

# --------------------------------------------------------------------------------------------------
# errors (Anchor numbering: 6000 + index)

ERRORS = (
    Error("InvalidInstruction", "Unknown instruction discriminator"),
    Error("InvalidInstructionData", "Instruction data has the wrong length"),
    Error("MissingAccounts", "Not enough accounts for this instruction"),
    Error("AccountNotWritable", "An account that must be writable is not"),
    Error("MissingSignature", "A required signer did not sign"),
    Error("WrongAccountOwner", "Account is not owned by the treasurer program"),
    Error("WrongAccountSize", "Account has the wrong size"),
    Error("WrongDiscriminator", "Account is of the wrong type"),
    Error("WrongPda", "Account is not the expected program-derived address"),
    Error("AlreadyInitialized", "Account is already initialized"),
    Error("WrongProgram", "Expected the System program, or the treasury's token program"),
    Error(
        "WrongCoordinator", "Coordinator account is not owned by the treasury's coordinator program"
    ),
    Error(
        "NotARun", "Account is not a coordinator Run of the supported layout (size, type, version)"
    ),
    Error("NotPoints", "Account is not a coordinator Points account (size, type)"),
    Error("WrongPoints", "The Points account is not the member's for the treasury's run"),
    Error("WrongRun", "The Run account is not the treasury's run"),
    Error("Unauthorized", "Signer is not the run's authority"),
    Error("WrongClaimKey", "Signer is not the member's registered claim key"),
    Error("InvalidClaimKey", "A claim key must be a non-zero key"),
    Error("WrongMint", "Mint is not the treasury's, or not a token mint of the token program"),
    Error(
        "UnsupportedMint",
        "The mint has an extension that could take or hold the vault's tokens "
        "(transfer fee or hook, permanent delegate, non-transferable, default frozen, pausable)",
    ),
    Error(
        "WrongVault",
        "Vault is not the treasury's (or the vault was named as the other side of a transfer)",
    ),
    Error("WrongRentRecipient", "The rent goes back to the treasury's payer"),
    Error("InvalidRate", "reward_per_point must be > 0 and claim_window >= 0"),
    Error("RateLowered", "The rate per point can only be raised"),
    Error("NoChange", "The instruction would change nothing"),
    Error("ZeroAmount", "The amount must be > 0"),
    Error(
        "NothingToClaim", "Everything the settled points entitle this member to has been claimed"
    ),
    Error("BeyondEntitlement", "The amount exceeds what the settled points entitle this member to"),
    Error("VaultShort", "The vault holds less than the amount: it must be funded"),
    Error(
        "RunStillOpen", "The run is not closed (or its close was not recorded by mark_run_closed)"
    ),
    Error("ClaimWindowOpen", "Claims are still open: the treasury closes after the claim window"),
    Error(
        "PointsRemain",
        "The member's Points account and treasury still exist: something may be claimable",
    ),
    Error("ArithmeticOverflow", "Arithmetic overflow"),
    Error("StakesOff", "This treasury requires no stakes (init_stakes was not called)"),
    Error(
        "NotJoinAuthority",
        "The run's join authority is not the treasury's joiner PDA, or its join policy "
        "is not Authorized",
    ),
    Error(
        "DelayTooShort",
        "unstake_delay must cover an epoch, its cooldown and a round of the run's config",
    ),
    Error("StillInRun", "The wallet is still in the run's registry: exit_run first"),
    Error("WrongStakeState", "The stake is not in the state this instruction needs"),
    Error("StakeLocked", "The unstake delay is not over"),
    Error(
        "NotConvicted",
        "Neither the Run's client nor its registry entry at this index is this wallet, convicted",
    ),
    Error("DuplicateAccount", "The same account was passed for two roles"),
    Error("StakesRemain", "Stakes are still held: each must be withdrawn or slashed first"),
)


def error_code(name: str) -> int:
    return 6000 + [e.name for e in ERRORS].index(name)


PROGRAM = ProgramAbi(
    name="treasurer",
    c_prefix="TREAS",
    description="cohort treasurer: escrow a run's reward token and pay members for settled points",
    placeholder_address="CohortTreasurer1111111111111111111111111111",
    addresses={"TOKEN_PROGRAM_ID": TOKEN_PROGRAM, "TOKEN_2022_PROGRAM_ID": TOKEN_2022_PROGRAM},
)
