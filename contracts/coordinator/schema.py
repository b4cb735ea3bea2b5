"""The coordinator's ABI — the one source of truth for its accounts, instructions, events and errors.

`codegen.py` turns this into the C header the program and the host core compile against
(`src/generated/abi.h`) and the Anchor 0.30+ IDL (`idl.json`) the SDK, explorers and Anchor clients read.
Every type is fixed-size and naturally aligned with explicit padding, so its C layout *is* its Borsh
encoding (integers little-endian, arrays without length prefix, enums and bools as one byte).
"""

from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------------------------------
# the little type language


@dataclass(frozen=True)
class Prim:
    name: str  # IDL name
    c: str
    size: int

    @property
    def align(self) -> int:
        return self.size if self.name != "pubkey" else 1


U8 = Prim("u8", "uint8_t", 1)
U16 = Prim("u16", "uint16_t", 2)
U32 = Prim("u32", "uint32_t", 4)
U64 = Prim("u64", "uint64_t", 8)
I64 = Prim("i64", "int64_t", 8)
F32 = Prim("f32", "uint32_t", 4)  # IEEE-754 bits: the program stores and validates, never computes
BOOL = Prim("bool", "uint8_t", 1)
PUBKEY = Prim("pubkey", "SolPubkey", 32)


@dataclass(frozen=True)
class Array:
    item: object
    length: int | str  # a number or the name of a constant


@dataclass(frozen=True)
class Enum:
    name: str
    variants: tuple[str, ...]
    doc: str = ""


@dataclass(frozen=True)
class Field:
    name: str
    type: object
    doc: str = ""


@dataclass(frozen=True)
class Struct:
    name: str
    fields: tuple[Field, ...]
    doc: str = ""


@dataclass(frozen=True)
class Account:
    name: str
    writable: bool = False
    signer: bool = False
    address: str | None = None
    doc: str = ""


@dataclass(frozen=True)
class Instruction:
    name: str
    accounts: tuple[Account, ...]
    args: Struct | None
    doc: str = ""


@dataclass(frozen=True)
class Error:
    name: str
    msg: str


def F(name: str, type_: object, doc: str = "") -> Field:
    return Field(name, type_, doc)


def S(name: str, *fields: Field, doc: str = "") -> Struct:
    return Struct(name, tuple(fields), doc)


def Bytes(n: int | str) -> Array:
    return Array(U8, n)


# --------------------------------------------------------------------------------------------------
# constants

CONSTANTS: dict[str, int] = {
    "VERSION": 2,  # the Run layout: 2 added the seed-pending fields
    "MAX_CLIENTS": 256,
    "MAX_WITNESSES": 32,
    "NUM_ROUNDS": 4,
    "MAX_CHECKPOINTERS": 8,
    "MAX_HEALTH_CHECKS": 32,
    "RUN_ID_LEN": 32,
    "NAME_LEN": 64,
    "DESCRIPTION_LEN": 256,
    "CLIENT_VERSION_LEN": 64,
    "PRESET_LEN": 32,
    "REPO_LEN": 128,
    "REVISION_LEN": 64,
    "URL_LEN": 192,
    "PARTICIPANT_BITMAP_LEN": 32,  # one bit per epoch client index (MAX_CLIENTS bits)
    "BLOOM_BYTES": 512,  # 4096 bits: false positives <= 0.047% with 256 items and 10 hashes
    "BLOOM_HASHES": 10,
    "ENDPOINT_LEN": 160,  # a node's network address: printable ASCII, NUL-padded
}

SYSTEM_PROGRAM = "11111111111111111111111111111111"
SLOT_HASHES = "SysvarS1otHashes111111111111111111111111111"
INSTRUCTIONS_SYSVAR = "Sysvar1nstructions1111111111111111111111111"
ED25519_PROGRAM = "Ed25519SigVerify111111111111111111111111111"
# what a node key signs to prove it belongs to a wallet: this prefix || run address || wallet
JOIN_PROOF_PREFIX = b"cohort join v1"

# --------------------------------------------------------------------------------------------------
# enums (one byte each)

RunState = Enum(
    "RunState",
    (
        "Uninitialized",
        "WaitingForMembers",
        "Warmup",
        "RoundTrain",
        "RoundWitness",
        "Cooldown",
        "Finished",
        "Paused",
    ),
    "Phase of a run. Halted = Uninitialized | Finished | Paused.",
)
ClientState = Enum(
    "ClientState",
    ("Healthy", "Dropped", "Withdrawn"),
    "Dropped: failed a health check. Withdrawn: left (exit_run) or the run halted.",
)
CheckpointKind = Enum(
    "CheckpointKind",
    ("Dummy", "Hub", "P2P", "Gcs", "P2PGcs"),
    "Where joiners get the model: a Hugging Face repo (Hub), a GCS bucket (Gcs), or peers (P2P*, with "
    "the repo as fallback when no peer is left).",
)
Architecture = Enum("Architecture", ("HfLlama", "HfDeepseek", "HfAuto"))
DataType = Enum("DataType", ("Pretraining", "Finetuning"))
LrScheduleKind = Enum("LrScheduleKind", ("Constant", "Linear", "Cosine", "WarmupStableDecay"))
JoinPolicy = Enum(
    "JoinPolicy",
    ("Open", "Authorized"),
    "Open: any wallet may join. Authorized: only wallets holding a JoinAuthorization from the join "
    "authority.",
)
ENUMS = (RunState, ClientState, CheckpointKind, Architecture, DataType, LrScheduleKind, JoinPolicy)

# --------------------------------------------------------------------------------------------------
# structs

Checkpoint = S(
    "Checkpoint",
    F("kind", CheckpointKind),
    F("_pad", Bytes(3)),
    F("step", U32, "the training step the weights are from"),
    F("repo", Bytes("REPO_LEN"), "repo id / bucket (NUL-padded)"),
    F("revision", Bytes("REVISION_LEN"), "revision / prefix (NUL-padded, may be empty)"),
    F("weights_sha256", Bytes(32), "sha256 of the checkpoint's weights (zero if unknown)"),
)
LrSchedule = S(
    "LrSchedule",
    F("kind", LrScheduleKind),
    F("_pad", Bytes(3)),
    F("base_lr", F32),
    F("final_lr", F32),
    F("warmup_steps", U32),
    F("stable_steps", U32, "WarmupStableDecay only: steps at base_lr after warmup"),
    F("total_steps", U32),
)
DistroConfig = S(
    "DistroConfig",
    F("compression_decay", F32, "momentum decay beta"),
    F("clip_grad_norm", F32, "0 = no clipping"),
    F("weight_decay", F32),
    F("compression_topk", U16),
    F("compression_chunk", U16),
    F("quantize_1bit", BOOL),
    F("_pad", Bytes(3)),
)
ModelConfig = S(
    "ModelConfig",
    F("architecture", Architecture),
    F("data_type", DataType),
    F("_pad", Bytes(2)),
    F("max_seq_len", U32),
    F("cold_start_warmup_steps", U32),
    F("preset", Bytes("PRESET_LEN"), "model size preset or HF config name (NUL-padded)"),
    F("checkpoint", Checkpoint),
    F("data_location", Bytes("URL_LEN"), "data source URL or dataset name (NUL-padded)"),
    F("lr_schedule", LrSchedule),
    F("optimizer", DistroConfig),
)
RunConfig = S(
    "RunConfig",
    F("warmup_time", U64, "seconds"),
    F("cooldown_time", U64, "seconds"),
    F("max_round_train_time", U64, "seconds"),
    F("round_witness_time", U64, "seconds"),
    F("epoch_time", U64, "seconds, counted from the start of Warmup"),
    F(
        "global_batch_size_warmup_tokens",
        U64,
        "tokens over which the batch size ramps up (0 = none)",
    ),
    F("total_steps", U32),
    F("init_min_clients", U16, "clients needed to start an epoch"),
    F("min_clients", U16, "clients needed to keep training"),
    F(
        "witness_nodes",
        U16,
        "witnesses elected per round; quorum is relative to this, never to arrivals",
    ),
    F("global_batch_size_start", U16, "sequences per round at the start of the ramp"),
    F("global_batch_size_end", U16),
    F("waiting_for_members_extra_time", U8, "seconds"),
    F("join_policy", JoinPolicy),
)
RunMetadata = S(
    "RunMetadata",
    F("name", Bytes("NAME_LEN")),
    F("description", Bytes("DESCRIPTION_LEN")),
    F("client_version", Bytes("CLIENT_VERSION_LEN"), "the client version participants must run"),
    F("num_parameters", U64),
    F("vocab_size", U64),
)
Progress = S(
    "Progress",
    F("epoch", U32),
    F("step", U32, "the step being trained; starts at 1"),
    F("epoch_start_data_index", U64, "first sequence index of the current epoch"),
)
Client = S(
    "Client",
    F("signer", PUBKEY, "wallet"),
    F("p2p_identity", PUBKEY, "iroh node id (ed25519 public key)"),
    F("state", ClientState),
    F("_pad", U8),
    F("registry_index", U16),
    F("exited_height", U32, "round height at which the client stopped being Healthy"),
    doc="A member of the current epoch. Indices into the epoch's client list never change mid-epoch.",
)
Witness = S(
    "Witness",
    F("index", U16, "the witness's epoch client index"),
    F("position", U16, "its position in the round's witness shuffle (< witness_nodes)"),
    F("_pad", U32),
    F(
        "participants",
        Bytes("PARTICIPANT_BITMAP_LEN"),
        "clients whose previous-round result it verified",
    ),
    F("bloom_salt", U64, "chosen by the witness; keys the bloom's hash functions"),
    F("broadcast_bloom", Bytes("BLOOM_BYTES"), "commitment hashes of the results it verified"),
)
Round = S(
    "Round",
    F("witnesses", Array(Witness, "MAX_WITNESSES")),
    F("active_mask", Bytes("PARTICIPANT_BITMAP_LEN"), "clients that train in this round"),
    F(
        "witness_digest",
        Bytes(32),
        "running sha256 over the witnesses submitted (feeds the next seed)",
    ),
    F("data_index", U64, "first sequence index of the round"),
    F("random_seed", U64),
    F("height", U32, "round number within the epoch"),
    F("witnesses_len", U16),
    F("active_count", U16),
    F("batch_size", U32, "global batch size of the round, in sequences"),
    F("_pad", U32),
)
EpochState = S(
    "EpochState",
    F("rounds", Array(Round, "NUM_ROUNDS"), "ring buffer; rounds_head is the current one"),
    F("clients", Array(Client, "MAX_CLIENTS")),
    F("clients_len", U32),
    F("rounds_head", U32),
    F("start_step", U32),
    F("last_step", U32, "0 = not set; set at epoch timeout to step + 2 (two flush rounds)"),
    F("start_timestamp", I64),
    F("first_round", BOOL),
    F("cold_start_epoch", BOOL),
    F("_pad", Bytes(6)),
)
RegistryEntry = S(
    "RegistryEntry",
    F("signer", PUBKEY),
    F("p2p_identity", PUBKEY),
    F("earned", U64, "reward points: rounds trained in successfully finished epochs"),
    F("join_marker", U64, "equals Run.next_active while the join is pending for the next epoch"),
)
Run = S(
    "Run",
    F("version", U32),
    F("run_state", RunState),
    F("pending_pause", BOOL),
    F("seed_pending", BOOL, "the next round's inputs are frozen; its seed waits for seed_slot's hash"),
    F("_pad", U8),
    F("nonce", U64, "increases on every change of this account"),
    F("run_id", Bytes("RUN_ID_LEN")),
    F("authority", PUBKEY, "may update, pause and close the run"),
    F("join_authority", PUBKEY, "grants JoinAuthorizations when join_policy is Authorized"),
    F(
        "checkpointers",
        Array(PUBKEY, "MAX_CHECKPOINTERS"),
        "may move the checkpoint pointer (zero = empty)",
    ),
    F("run_state_start", I64, "unix time the current phase began"),
    F("last_seed", U64, "seed of the latest round (chained into the next)"),
    F("metadata", RunMetadata),
    F("config", RunConfig),
    F("model", ModelConfig),
    F("progress", Progress),
    F("epoch", EpochState),
    F("registry", Array(RegistryEntry, "MAX_CLIENTS"), "wallets that joined and have not exited"),
    F("registry_len", U32),
    F("_pad2", U32),
    F("next_active", U64, "join marker of the next epoch"),
    F("seed_slot", U64, "the slot the next round's inputs froze in (while seed_pending)"),
    F("seed_mask", Bytes("PARTICIPANT_BITMAP_LEN"), "the next round's active clients, frozen with its inputs"),
    doc="The state of one training run (a zero-copy account, created by the client at its exact size).",
)
RunIndex = S(
    "RunIndex",
    F("bump", U8),
    F("_pad", Bytes(7)),
    F("run_id", Bytes("RUN_ID_LEN")),
    F("run", PUBKEY, "the Run account"),
    F("authority", PUBKEY),
    doc='PDA ["run", run_id]: finds a run\'s state account from its id.',
)
JoinAuthorization = S(
    "JoinAuthorization",
    F("bump", U8),
    F("allowed", BOOL),
    F("_pad", Bytes(6)),
    F("run", PUBKEY),
    F("grantee", PUBKEY),
    doc='PDA ["join", run, grantee], written by the join authority.',
)
Points = S(
    "Points",
    F("bump", U8),
    F("_pad", Bytes(7)),
    F("run", PUBKEY),
    F("wallet", PUBKEY),
    F("points", U64, "claimed reward points; they outlive the wallet's registry entry"),
    doc='PDA ["points", run, wallet]: what a wallet earned in a run, filled by exit_run and claim_points.',
)
WitnessMetadata = S(
    "WitnessMetadata",
    F("loss", F32),
    F("tokens_per_sec", F32),
    F("bytes_sent", U64),
    F("bytes_received", U64),
    F("eval_loss", F32, "held-out loss the witness measured most recently (0 = none yet)"),
    F("eval_tokens", U32, "tokens that held-out loss covers"),
    doc="Kept in the transaction and the WitnessSubmitted event for indexers; never stored.",
)

# instruction arguments
InitializeRunArgs = S(
    "InitializeRunArgs",
    F("run_id", Bytes("RUN_ID_LEN"), "1..32 bytes, NUL-padded"),
    F("join_authority", PUBKEY),
)
UpdateMetadataArgs = S("UpdateMetadataArgs", F("metadata", RunMetadata))
UpdateConfigArgs = S("UpdateConfigArgs", F("config", RunConfig), F("progress", Progress))
UpdateModelArgs = S("UpdateModelArgs", F("model", ModelConfig))
SetCheckpointersArgs = S(
    "SetCheckpointersArgs", F("checkpointers", Array(PUBKEY, "MAX_CHECKPOINTERS"))
)
SetPausedArgs = S("SetPausedArgs", F("paused", BOOL))
SetJoinAuthorizationArgs = S("SetJoinAuthorizationArgs", F("grantee", PUBKEY), F("allowed", BOOL))
JoinRunArgs = S(
    "JoinRunArgs",
    F("p2p_identity", PUBKEY, "iroh node id; an earlier Ed25519 instruction proves its key signed"),
    F("endpoint", Bytes("ENDPOINT_LEN"), "the node's address (printable ASCII, NUL-padded); not stored"),
)
WarmupWitnessArgs = S("WarmupWitnessArgs", F("index", U16))
WitnessArgs = S(
    "WitnessArgs",
    F("step", U32, "the step this witness attests; rejected for any other"),
    F("index", U16),
    F("position", U16),
    F("participants", Bytes("PARTICIPANT_BITMAP_LEN")),
    F("bloom_salt", U64),
    F("broadcast_bloom", Bytes("BLOOM_BYTES")),
    F("metadata", WitnessMetadata),
)
HealthCheckArgs = S(
    "HealthCheckArgs",
    F("count", U16),
    F(
        "indices",
        Array(U16, "MAX_HEALTH_CHECKS"),
        "epoch client indices; the first `count` are checked",
    ),
)
CheckpointArgs = S("CheckpointArgs", F("checkpoint", Checkpoint))

# events (Anchor format: sha256("event:<Name>")[:8] + Borsh, in "Program data:" log lines)
RunStateChanged = S(
    "RunStateChanged",
    F("run", PUBKEY),
    F("from_state", RunState),
    F("to_state", RunState),
    F("_pad", Bytes(2)),
    F("epoch", U32),
    F("step", U32),
    F("height", U32),
    F("random_seed", U64),
    F("timestamp", I64),
)
ClientJoined = S(
    "ClientJoined",
    F("run", PUBKEY),
    F("signer", PUBKEY),
    F("p2p_identity", PUBKEY),
    F("endpoint", Bytes("ENDPOINT_LEN"), "the node's address: peers read it back from the logs"),
)
ClientExited = S("ClientExited", F("run", PUBKEY), F("signer", PUBKEY))
WitnessSubmitted = S(
    "WitnessSubmitted",
    F("run", PUBKEY),
    F("signer", PUBKEY),
    F("step", U32),
    F("index", U16),
    F("position", U16),
    F("metadata", WitnessMetadata),
)
ClientDropped = S(
    "ClientDropped", F("run", PUBKEY), F("signer", PUBKEY), F("index", U16), F("_pad", Bytes(6))
)
CheckpointUpdated = S("CheckpointUpdated", F("run", PUBKEY), F("checkpoint", Checkpoint))
RunUpdated = S("RunUpdated", F("run", PUBKEY), F("what", U8))
PointsClaimed = S(
    "PointsClaimed", F("run", PUBKEY), F("wallet", PUBKEY), F("points", U64, "moved in this claim"),
    F("total", U64, "now in the wallet's Points account"),
)  # fmt: skip

EVENTS = (RunStateChanged, ClientJoined, ClientExited, WitnessSubmitted, ClientDropped, CheckpointUpdated,
          RunUpdated, PointsClaimed)  # fmt: skip
ACCOUNT_TYPES = (Run, RunIndex, JoinAuthorization, Points)
ARG_TYPES = (InitializeRunArgs, UpdateMetadataArgs, UpdateConfigArgs, UpdateModelArgs, SetCheckpointersArgs,
             SetPausedArgs, SetJoinAuthorizationArgs, JoinRunArgs, WarmupWitnessArgs, WitnessArgs,
             HealthCheckArgs, CheckpointArgs)  # fmt: skip
STRUCTS = (Checkpoint, LrSchedule, DistroConfig, ModelConfig, RunConfig, RunMetadata, Progress, Client,
           Witness, Round, EpochState, RegistryEntry, WitnessMetadata, *ACCOUNT_TYPES, *ARG_TYPES,
           *EVENTS)  # fmt: skip

# --------------------------------------------------------------------------------------------------
# instructions

_run_w = Account("run", writable=True, doc="the Run account")
_slot_hashes = Account("slot_hashes", address=SLOT_HASHES, doc="randomness for round seeds")
_authority = Account("authority", signer=True, doc="the run's authority")
_user = Account("user", signer=True, doc="the client's wallet")
_points = Account(
    "points", writable=True, doc='PDA ["points", run, user]; the user pays its rent when created'
)
_system = Account("system_program", address=SYSTEM_PROGRAM)
_payer_user = Account("user", writable=True, signer=True, doc="the client's wallet (pays the rent)")

INSTRUCTIONS = (
    Instruction(
        "initialize_run",
        (
            Account("payer", writable=True, signer=True),
            Account("authority", signer=True, doc="becomes the run's authority"),
            Account(
                "run", writable=True, doc="created in the same transaction, owned by this program"
            ),
            Account("run_index", writable=True, doc='PDA ["run", run_id]'),
            Account("system_program", address=SYSTEM_PROGRAM),
        ),
        InitializeRunArgs,
        "Set up a run. It starts Uninitialized; configure it, then set_paused(false) opens it.",
    ),
    Instruction("update_metadata", (_authority, _run_w), UpdateMetadataArgs, "Any time."),
    Instruction("update_config", (_authority, _run_w), UpdateConfigArgs, "Only while halted."),
    Instruction("update_model", (_authority, _run_w), UpdateModelArgs, "Only while halted."),
    Instruction("set_checkpointers", (_authority, _run_w), SetCheckpointersArgs, "Any time."),
    Instruction("set_paused", (_authority, _run_w, _slot_hashes), SetPausedArgs),
    Instruction(
        "set_join_authorization",
        (
            Account("join_authority", writable=True, signer=True),
            Account("run", writable=True, doc="a revoked wallet's pending join is withdrawn"),
            Account("authorization", writable=True, doc='PDA ["join", run, grantee]'),
            Account("system_program", address=SYSTEM_PROGRAM),
        ),
        SetJoinAuthorizationArgs,
    ),
    Instruction(
        "join_run",
        (
            _user,
            _run_w,
            Account(
                "authorization",
                doc='PDA ["join", run, user] when join_policy is Authorized; else any',
            ),
            _slot_hashes,
            Account(
                "instructions",
                address=INSTRUCTIONS_SYSVAR,
                doc="where the node key's Ed25519 proof of possession is read",
            ),
        ),
        JoinRunArgs,
        "Join the next epoch (again each epoch). An earlier instruction of the same transaction must be "
        'an Ed25519 signature by p2p_identity over "cohort join v1" || run || wallet.',
    ),
    Instruction(
        "exit_run",
        (_payer_user, _run_w, _slot_hashes, _points, _system),
        None,
        "Leave the run; frees the registry slot. Unclaimed points move to the Points account first.",
    ),
    Instruction(
        "claim_points",
        (_payer_user, _run_w, _points, _system),
        None,
        "Move the wallet's unclaimed points into its Points account (created on the first claim).",
    ),
    Instruction(
        "close_join_authorization",
        (
            Account("join_authority", writable=True, signer=True, doc="receives the rent"),
            Account("run", writable=True, doc="the grantee's pending join is withdrawn"),
            Account("authorization", writable=True, doc='PDA ["join", run, grantee]'),
        ),
        None,
        "Close a JoinAuthorization and refund its rent (the grant is revoked with it).",
    ),
    Instruction(
        "tick", (_user, _run_w, _slot_hashes), None,
        "Advance the phase when a timeout is due; from the slot after a round's inputs froze "
        "(seed_pending), start that round.",
    ),
    Instruction("warmup_witness", (_user, _run_w, _slot_hashes), WarmupWitnessArgs),
    Instruction("witness", (_user, _run_w, _slot_hashes), WitnessArgs),
    Instruction("health_check", (_user, _run_w, _slot_hashes), HealthCheckArgs),
    Instruction("checkpoint", (_user, _run_w, _slot_hashes), CheckpointArgs),
    Instruction(
        "close_run",
        (
            _authority,
            _run_w,
            Account("run_index", writable=True),
            Account("recipient", writable=True, doc="receives the rent"),
        ),
        None,
        "Only while halted: closes both accounts and refunds their rent.",
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
    Error("WrongAccountOwner", "Account is not owned by the coordinator program"),
    Error("WrongAccountSize", "Account has the wrong size"),
    Error("WrongDiscriminator", "Account is of the wrong type"),
    Error("WrongVersion", "Run account layout version is not supported"),
    Error("WrongSysvar", "Expected the SlotHashes or Instructions sysvar"),
    Error("WrongPda", "Account is not the expected program-derived address"),
    Error("AlreadyInitialized", "Account is already initialized"),
    Error("RunIdInvalid", "run_id must be 1 to 32 bytes"),
    Error("Unauthorized", "Signer is not the run's authority"),
    Error("JoinNotAuthorized", "Wallet holds no JoinAuthorization for this run"),
    Error("ConfigInvalid", "Run config violates a rule"),
    Error("ModelInvalid", "Model config violates a rule"),
    Error("ProgressInvalid", "Progress violates a rule"),
    Error("MetadataInvalid", "Metadata violates a rule"),
    Error("NotHalted", "Only allowed while the run is halted (uninitialized, paused or finished)"),
    Error("Halted", "The run is halted"),
    Error("Finished", "The run is finished"),
    Error("CannotResume", "Only a paused or uninitialized run can be resumed"),
    Error("RunFull", "The next epoch is full"),
    Error("RegistryFull", "The client registry is full"),
    Error("NotAClient", "Signer is not a client of this run"),
    Error("NotInEpoch", "Signer is not a healthy client of the current epoch"),
    Error("InvalidRunState", "Not allowed in the run's current phase"),
    Error("NothingToTick", "No phase change is due"),
    Error("WrongStep", "Witness is for another step"),
    Error("InvalidWitness", "Witness index or position does not match the round's election"),
    Error("DuplicateWitness", "This client already witnessed this round"),
    Error("WitnessesFull", "The round already has all its witnesses"),
    Error("InvalidHealthCheck", "A listed client is healthy or was not training"),
    Error("NotACheckpointer", "Signer may not move the checkpoint pointer"),
    Error("InvalidCheckpoint", "Checkpoint kind or repo is invalid"),
    Error("ArithmeticOverflow", "Arithmetic overflow"),
    Error("DuplicateAccount", "The same account was passed for two roles"),
    Error("WrongProgram", "Expected the system program"),
    Error("EndpointInvalid", "endpoint must be printable ASCII followed only by NUL bytes"),
    Error(
        "NodeKeyNotProven",
        'No earlier Ed25519 instruction in which p2p_identity signs "cohort join v1" || run || wallet',
    ),
    Error("IdentityTaken", "Another wallet of this run already holds this p2p_identity"),
    Error("AlreadyJoined", "Already joined the next epoch with this p2p_identity"),
    Error("NoChange", "The instruction would change nothing"),
    Error("NonCanonical", "Instruction arguments are not in canonical form (non-zero padding or unused bytes)"),
    Error("JoinDuringWarmup", "Joins for the next epoch open when this epoch's first round starts"),
    Error("RoundOver", "The round's witness time is over"),
    Error("SeedPending", "The next round's seed is waiting for the slot its inputs froze in to complete"),
)


def error_code(name: str) -> int:
    return 6000 + [e.name for e in ERRORS].index(name)
