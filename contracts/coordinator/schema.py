"""The coordinator's ABI — the one source of truth for its accounts, instructions, events and errors.

`codegen.py` turns this into the C header the program and the host core compile against
(`src/generated/abi.h`) and the Anchor 0.30+ IDL (`idl.json`) the SDK, explorers and Anchor clients read.
Every type is fixed-size and naturally aligned with explicit padding, so its C layout *is* its Borsh
encoding (integers little-endian, arrays without length prefix, enums and bools as one byte).
"""

from __future__ import annotations

from cohort.sbf.abi.schema import (  # noqa: F401 - the type language, shared by every program's schema
    BOOL,
    F32,
    I64,
    PUBKEY,
    U8,
    U16,
    U32,
    U64,
    Account,
    Array,
    Bytes,
    Enum,
    Error,
    F,
    Field,
    Instruction,
    Prim,
    ProgramAbi,
    S,
    Struct,
)

# --------------------------------------------------------------------------------------------------
# constants

CONSTANTS: dict[str, int] = {
    "VERSION": 11,  # the Run layout: 3 = results roots, lookahead seeds, hot prefix, weights votes; 4 = checks
    # (verification_percent, u32 round times, check seeds and failed-check tallies); 5 = no witness digest;
    # 6 = pipeline_depth; 7 = EpochState.epoch (result statements name it), EpochState.decisions; 8 = disputes,
    # CheckSeed.healthy (verifiers are drawn from the members healthy when a seed was revealed),
    # FailedCheck.replay; 9 = RunConfig.conviction_ban_epochs, RegistryEntry.banned_until (bans outlive the epoch);
    # 10 = measured work: Client.delivered, EpochState.decided_rounds, RegistryEntry.proven_share;
    # 11 = Run.cooldown_seeds (Cooldown reveals the seeds that check the epoch's last steps), RunConfig.check_rate_kib,
    # Client.refuted_claims
    "MAX_BAN_EPOCHS": 10_000,  # the longest ban a run may set (conviction_ban_epochs)
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
    "ENDPOINT_LEN": 160,  # a node's network address: printable ASCII, NUL-padded
    "DISSENT_LIMIT": 3,  # a witness whose root lost this many decisions of an epoch gets no more seats
    "MEDIAN_SHARE": 4,  # the share of a member declaring the median throughput (shares are in quarters)
    # verification of honest work: the checks of step s are drawn from the seed of the round of step
    # s + CHECK_SEED_LAG, which hashes the slot of the instruction that ended the round of step s + 1 (the one
    # that decided step s, or ran out its time): nobody knows it before step s's results are final
    "CHECK_SEED_LAG": 4,
    "MAX_VERIFIERS": 3,  # verifiers of one check, drawn among healthy members; a strict majority opens a dispute
    # disputes: a check whose verifiers' majority reported a failure is replayed by a larger committee drawn
    # from the seed of the round DISPUTE_SEED_LAG after the one it opened in (fixed after it opened)
    "DISPUTE_VERIFIERS": 128,  # the dispute committee: min(DISPUTE_VERIFIERS, healthy members but the trainer)
    "DISPUTE_SEED_LAG": 3,
    "MAX_DISPUTES": 4,  # disputes open at once
    # a dispute of step s lapses (no conviction, nobody penalised) once the round of step s + DISPUTE_HORIZON is
    # over: within the 16 steps a trainer keeps its committed states
    "DISPUTE_HORIZON": 14,
    "CHECK_WINDOW": 32,  # revealed round seeds kept (reports of a step are taken while its seed is kept)
    "CHECK_SLOTS": 16,  # failed-check tallies open at once
    # seeds Cooldown reveals after the epoch's last round, one per the epoch's mean round time: the checks of its
    # last CHECK_SEED_LAG - 1 steps, and disputes opened late (the check clock moves one step per seed)
    "COOLDOWN_SEEDS": 16,
    # outcomes of the epoch's last rounds, kept past the round ring (NUM_ROUNDS): a client whose view of the
    # chain jumps that many rounds (a lagging RPC node, a restarted follower) still finds each step's applied set
    "DECISION_WINDOW": 8,
}

SYSTEM_PROGRAM = "11111111111111111111111111111111"
SLOT_HASHES = "SysvarS1otHashes111111111111111111111111111"
INSTRUCTIONS_SYSVAR = "Sysvar1nstructions1111111111111111111111111"
ED25519_PROGRAM = "Ed25519SigVerify111111111111111111111111111"
# what a node key signs to prove it belongs to a wallet: this prefix || run address || wallet || the run's
# join marker (next_active, u64 LE), so a proof is good for one joining window only
JOIN_PROOF_PREFIX = b"cohort join v2"
# what a trainer's node key signs for each result it publishes: this prefix || run address || epoch u32 LE ||
# step u32 LE || batch start u64 LE || batch end u64 LE || commitment (sha256 of the payload). Two such
# statements for one epoch and step with different commitments prove equivocation; the epoch (which never
# repeats: update_config cannot move it back) keeps a step the authority rewound from pairing an honest
# member's old statement with its new one.
RESULT_PROOF_PREFIX = b"cohort result v2"

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
    ("Healthy", "Dropped", "Withdrawn", "Convicted"),
    "Dropped: failed a health check. Withdrawn: left (exit_run) or the run halted. Convicted: proven "
    "dishonest (its unclaimed points are forfeited).",
)
ConvictionReason = Enum(
    "ConvictionReason",
    ("Equivocation", "FailedVerification", "FalseReport"),
    "Equivocation: two signed results with different commitments for one step. FailedVerification: a strict "
    "majority of a check's verifiers reported that its replay of the step failed, and then a strict majority of "
    "the dispute's committee (report_check). FalseReport: it reported a replay mismatch that a strict majority "
    "of the dispute's committee refuted.",
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
CheckFailure = Enum(
    "CheckFailure",
    (
        "Unspecified",
        "PayloadMismatch",
        "StateMismatch",
        "StateNotDelivered",
        "ResultNotDelivered",
        "Passed",
    ),
    "Why a verifier found a checked step dishonest (Unspecified is never a valid report): its replay "
    "disagrees with the published payload (PayloadMismatch) or with the optimizer state after the step "
    "(StateMismatch), or the trainer did not deliver the states the check needs (StateNotDelivered) or "
    "its result (ResultNotDelivered). Passed: the replay held up (only a dispute's committee reports it).",
)
DisputeOutcome = Enum(
    "DisputeOutcome",
    ("Convicted", "Refuted", "Lapsed"),
    "Convicted: a strict majority of the committee confirmed the failure. Refuted: a strict majority found the "
    "step honest (reporters of a replay mismatch are convicted: FalseReport). Lapsed: no majority in time.",
)
ENUMS = (RunState, ClientState, ConvictionReason, CheckpointKind, Architecture, DataType, LrScheduleKind, JoinPolicy,
         CheckFailure, DisputeOutcome)  # fmt: skip

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
    F("epoch_time", U64, "seconds, counted from the start of Warmup"),
    F(
        "global_batch_size_warmup_tokens",
        U64,
        "tokens over which the batch size ramps up (0 = none)",
    ),
    F("max_round_train_time", U32, "seconds"),
    F("round_witness_time", U32, "seconds"),
    F("total_steps", U32),
    F("init_min_clients", U16, "clients needed to start an epoch"),
    F("min_clients", U16, "clients needed to keep training"),
    F("global_batch_size_start", U16, "sequences per round at the start of the ramp"),
    F("global_batch_size_end", U16),
    F("waiting_for_members_extra_time", U8, "seconds"),
    F("join_policy", JoinPolicy),
    F(
        "witness_nodes",
        U8,
        "witness seats per round (<= MAX_WITNESSES); a strict majority of them decides a step, never of the arrivals",
    ),
    F(
        "max_share_ratio",
        U8,
        "how much more (or less) data than the median member a fast (slow) one gets: 1..16, 1 = equal shares",
    ),
    F(
        "verification_percent",
        U8,
        "share of trainers' steps that verifiers replay and check: 0..100 (0 = none)",
    ),
    F(
        "pipeline_depth",
        U8,
        "step s trains on the weights after step s - pipeline_depth: 2..4; deeper hides slower links behind compute",
    ),
    F(
        "conviction_ban_epochs",
        U16,
        "epochs a convicted wallet and its node key are barred from after the conviction's: 1..MAX_BAN_EPOCHS",
    ),
    F(
        "check_rate_kib",
        U16,
        "KiB/s every member must serve its committed states at: a check's fetch is given the bytes it asks at this "
        "rate (plus a slack) before its trainer is reported: 16..65535",
    ),
    F("_pad", Bytes(2)),
    doc="64 bytes: a create transaction packs config, model and metadata into one packet with no byte to spare.",
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
    F(
        "dissents",
        U8,
        "decisions of this epoch its witness root lost (DISSENT_LIMIT: no more seats)",
    ),
    F("registry_index", U16),
    F("exited_height", U32, "round height at which the client stopped being Healthy"),
    F(
        "weights_vote",
        Bytes(32),
        "manifest hash of its epoch-end checkpoint (vote_weights; zero = none)",
    ),
    F(
        "share",
        U16,
        "its weight in each round's batch, in quarters of the median member's (set at Warmup: its "
        "declared throughput's, capped at its registry entry's proven_share, MEDIAN_SHARE if none)",
    ),
    F(
        "refuted_claims",
        U8,
        "its non-delivery claims of this epoch a dispute's committee refuted: one, and it may claim non-delivery "
        "no more this epoch (a coalition cannot keep the dispute slots and committees busy for free)",
    ),
    F("_pad2", U8),
    F(
        "delivered",
        U32,
        "rounds of this epoch whose decided result set named it (among the round's trainers): it earns "
        "share points for each, and its proven_share follows them",
    ),
    doc="A member of the current epoch. Indices into the epoch's client list never change mid-epoch.",
)
Witness = S(
    "Witness",
    F("index", U16, "the witness's epoch client index"),
    F("position", U16, "its place in the round's witness order (a seat)"),
    F("_pad", U32),
    F(
        "participants",
        Bytes("PARTICIPANT_BITMAP_LEN"),
        "trainers whose result of the attested step it holds",
    ),
    F(
        "results_root",
        Bytes(32),
        "sha256 of its results list: the sorted (trainer, commitment) pairs it holds",
    ),
    F(
        "weights_digest",
        U64,
        "digest of its weights after applying every step before the attested one",
    ),
)
Round = S(
    "Round",
    F("active_mask", Bytes("PARTICIPANT_BITMAP_LEN"), "clients that train in this round"),
    F(
        "witnessed_mask",
        Bytes("PARTICIPANT_BITMAP_LEN"),
        "clients that have a witness record this round",
    ),
    F(
        "decided_root",
        Bytes(32),
        "the results root a strict majority of seats attested (when decided)",
    ),
    F("data_index", U64, "first sequence index of the round"),
    F("random_seed", U64),
    F(
        "weights_digest",
        U64,
        "the weights digest a strict majority of seats reported (when digest_votes > 0)",
    ),
    F("height", U32, "round number within the epoch"),
    F("batch_size", U32, "global batch size of the round, in sequences"),
    F("witnesses_len", U16),
    F("active_count", U16),
    F("decided_votes", U16, "seats behind decided_root"),
    F("digest_votes", U16, "seats behind weights_digest"),
    F(
        "decided",
        BOOL,
        "the previous step's applied set is fixed: the results list whose sha256 is decided_root",
    ),
    F("_pad", Bytes(7)),
    doc="One stored round's summary (its witness records are in Run.witnesses, outside the hot prefix).",
)
CheckSeed = S(
    "CheckSeed",
    F("step", U32, "the step of the round this seed is (0 = empty)"),
    F("_pad", U32),
    F("seed", U64, "the round's seed; it draws the checks of step `step - CHECK_SEED_LAG`"),
    F(
        "healthy",
        Bytes("PARTICIPANT_BITMAP_LEN"),
        "members healthy when it was revealed: the verifiers and dispute committees it draws come from them",
    ),
    doc="A revealed round seed, kept so checks can be reported after the round ring moved on.",
)
FailedCheck = S(
    "FailedCheck",
    F("step", U32, "the checked step (0 = a free slot)"),
    F("trainer", U16, "the checked trainer's epoch client index"),
    F("reporters", U8, "bit k: the check's k-th verifier reported a failure"),
    F(
        "opener",
        U8,
        "epoch index of the verifier whose report opened this tally (a full table evicts the "
        "tallies of whoever opened the most)",
    ),
    F(
        "replay",
        U8,
        "bit k: the k-th verifier's report claimed a replay mismatch (Payload/StateMismatch)",
    ),
    F("_pad", Bytes(3)),
    doc="The failure reports of one check until a strict majority of its verifiers opens a dispute.",
)
Dispute = S(
    "Dispute",
    F("step", U32, "the disputed step (0 = a free slot)"),
    F("trainer", U16, "the checked trainer's epoch client index"),
    F(
        "reporters",
        U8,
        "bit k: the check's k-th verifier reported a failure (FailedCheck.reporters)",
    ),
    F("replay", U8, "bit k: and claimed a replay mismatch (FailedCheck.replay)"),
    F(
        "seed_step",
        U32,
        "the step of the round whose seed draws the committee: DISPUTE_SEED_LAG after the round it opened in",
    ),
    F(
        "fails",
        Bytes("PARTICIPANT_BITMAP_LEN"),
        "committee members (epoch indices) that reported a failure",
    ),
    F("passes", Bytes("PARTICIPANT_BITMAP_LEN"), "committee members that reported Passed"),
    doc="A check a strict majority of its verifiers failed, replayed by a larger committee drawn from a seed "
    "fixed after it opened; a strict majority of the committee convicts the trainer or refutes the reporters.",
)
StepDecision = S(
    "StepDecision",
    F("step", U32, "the attested step (its round's step - 1)"),
    F(
        "outcome",
        U8,
        "0 = an empty slot, 1 = decided (root is its applied set), 2 = its round ended undecided",
    ),
    F("_pad", Bytes(3)),
    F("root", Bytes(32), "the decided results root (outcome 1)"),
    doc="What the round that attested `step` decided, kept once the round ended.",
)
RoundWitnesses = S(
    "RoundWitnesses",
    F("records", Array(Witness, "MAX_WITNESSES")),
    doc="The witness records of one stored round.",
)
EpochState = S(
    "EpochState",
    F(
        "rounds",
        Array(Round, "NUM_ROUNDS"),
        "ring buffer of summaries; rounds_head is the current one",
    ),
    F("clients_len", U32),
    F("rounds_head", U32),
    F("start_step", U32),
    F(
        "last_step",
        U32,
        "0 = not set; set when the epoch must end: the round of last_step - 1 is a flush",
    ),
    F("start_timestamp", I64),
    F("members_nonce", U64, "changes whenever the epoch's client list or a member's state changes"),
    F("first_round", BOOL),
    F("cold_start_epoch", BOOL),
    F("_pad", Bytes(2)),
    F("epoch", U32, "progress.epoch when this epoch started: the epoch its result statements name"),
    F(
        "decided_rounds",
        U32,
        "rounds of this epoch that decided a step it trained (not its first: that attests the step "
        "before the epoch): what a member delivering every time delivered",
    ),
    F("_pad2", U32),
    F(
        "decisions",
        Array(StepDecision, "DECISION_WINDOW"),
        "the last rounds' outcomes: step s at s % DECISION_WINDOW",
    ),
)
RegistryEntry = S(
    "RegistryEntry",
    F("signer", PUBKEY),
    F("p2p_identity", PUBKEY),
    F(
        "earned",
        U64,
        "reward points: per finished epoch (to its healthy finishers), its delivered rounds times its share",
    ),
    F("join_marker", U64, "equals Run.next_active while the join is pending for the next epoch"),
    F(
        "throughput",
        U32,
        "tokens/s the wallet declared at its latest join (0 = unknown: counted as the median); only a "
        "hint: its share never exceeds proven_share",
    ),
    F(
        "banned_until",
        U32,
        "after a conviction: the first epoch it (and the node key it was convicted with, p2p_identity) may join; 0 = never convicted",
    ),
    F(
        "proven_share",
        U16,
        "the highest share it may get at Warmup (0 = none yet: MEDIAN_SHARE), set at each epoch's end from "
        "what it delivered: doubled after every decided round, kept after half of them, halved after fewer "
        "(or a drop), the lower clamp after a conviction",
    ),
    F("_pad", Bytes(6)),
)
Run = S(
    "Run",
    # -- the hot prefix: everything that changes from round to round (clients follow it with dataSlice)
    F("version", U32),
    F("run_state", RunState),
    F("pending_pause", BOOL),
    F(
        "seed_pending",
        BOOL,
        "the round is over and the next waits for a slot after seed_slot (its hash)",
    ),
    F(
        "cooldown_seeds",
        U8,
        "check seeds revealed since Cooldown began (the epoch's last steps are checked in it)",
    ),
    F("nonce", U64, "increases on every change of this account"),
    F("run_state_start", I64, "unix time the current phase began"),
    F("progress", Progress),
    F("last_seed", U64, "the latest seed derived (chained into the next)"),
    F(
        "next_seed",
        U64,
        "seed of the round after the current one, fixed when the current one started",
    ),
    F(
        "seed_slot",
        U64,
        "the slot the inputs of the next seed froze in (at the current round's start)",
    ),
    F(
        "next_mask",
        Bytes("PARTICIPANT_BITMAP_LEN"),
        "active clients of the round after the current one",
    ),
    F(
        "seed_mask",
        Bytes("PARTICIPANT_BITMAP_LEN"),
        "healthy clients frozen with seed_slot (the next next_mask)",
    ),
    F("epoch", EpochState),
    # -- the rest changes at epoch boundaries, on drops, or by the authority
    F("witnesses", Array(RoundWitnesses, "NUM_ROUNDS"), "witness records of the stored rounds"),
    F("clients", Array(Client, "MAX_CLIENTS"), "the epoch's members"),
    F("run_id", Bytes("RUN_ID_LEN")),
    F("authority", PUBKEY, "may update, pause and close the run"),
    F("join_authority", PUBKEY, "grants JoinAuthorizations when join_policy is Authorized"),
    F(
        "checkpointers",
        Array(PUBKEY, "MAX_CHECKPOINTERS"),
        "may set the checkpoint's fallback repo (zero = empty)",
    ),
    F("metadata", RunMetadata),
    F("config", RunConfig),
    F("model", ModelConfig),
    F("registry", Array(RegistryEntry, "MAX_CLIENTS"), "wallets that joined and have not exited"),
    F("registry_len", U32),
    F("_pad2", U32),
    F("next_active", U64, "join marker of the next epoch"),
    # -- verification of honest work (cleared when an epoch starts)
    F(
        "check_seeds",
        Array(CheckSeed, "CHECK_WINDOW"),
        "every round seed of the epoch as it is revealed, the entry of step r at r % CHECK_WINDOW",
    ),
    F("failed_checks", Array(FailedCheck, "CHECK_SLOTS"), "open tallies of failed-check reports"),
    F(
        "disputes",
        Array(Dispute, "MAX_DISPUTES"),
        "checks a majority of their verifiers failed, being replayed",
    ),
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
    F(
        "join_authority",
        PUBKEY,
        "who created it: receives the rent when it is closed, even after the run",
    ),
    doc='PDA ["join", run, grantee], written by the join authority.',
)
Points = S(
    "Points",
    F("bump", U8),
    F("_pad", Bytes(7)),
    F("run", PUBKEY),
    F("wallet", PUBKEY),
    F("points", U64, "claimed reward points; they outlive the wallet's registry entry"),
    doc='PDA ["points", run, wallet]: what a wallet earned in a run, filled by exit_run, claim_points and '
    "settle_points.",
)
Endpoint = S(
    "Endpoint",
    F("bump", U8),
    F("_pad", Bytes(7)),
    F("run", PUBKEY),
    F("wallet", PUBKEY),
    F("p2p_identity", PUBKEY, "the node id the endpoint belongs to (as joined)"),
    F("join_marker", U64, "the join it was written by (Run.next_active then)"),
    F("endpoint", Bytes("ENDPOINT_LEN"), "the node's address: printable ASCII, NUL-padded"),
    doc='PDA ["endpoint", run, wallet]: a member\'s network address, written by its join_run (peers read '
    "every member's with one getMultipleAccounts); closed by exit_run.",
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
    F(
        "endpoint",
        Bytes("ENDPOINT_LEN"),
        "the node's address (printable ASCII, NUL-padded), kept in its Endpoint account",
    ),
    F(
        "throughput",
        U32,
        "tokens/s this client measured it trains at (0 = unknown): its share's target, within its proven_share",
    ),
    F("_pad", U32),
)
WarmupWitnessArgs = S("WarmupWitnessArgs", F("index", U16))
WitnessArgs = S(
    "WitnessArgs",
    F("step", U32, "the step this witness attests; rejected for any other"),
    F("index", U16),
    F("position", U16),
    F("participants", Bytes("PARTICIPANT_BITMAP_LEN")),
    F("results_root", Bytes(32)),
    F("weights_digest", U64),
    F("metadata", WitnessMetadata),
)
HealthCheckArgs = S(
    "HealthCheckArgs",
    F(
        "step",
        U32,
        "the step whose trainers are reported; the records of the round after it (over) decide",
    ),
    F("count", U16),
    F("_pad", U16),
    F(
        "indices",
        Array(U16, "MAX_HEALTH_CHECKS"),
        "epoch client indices; the first `count` are checked",
    ),
)
CheckpointArgs = S("CheckpointArgs", F("checkpoint", Checkpoint))
VoteWeightsArgs = S(
    "VoteWeightsArgs",
    F("index", U16, "the voter's epoch client index"),
    F("_pad", U16),
    F("step", U32, "the step the epoch ended at (progress.step)"),
    F("manifest", Bytes(32), "manifest hash of the voter's epoch-end checkpoint"),
)
SettlePointsArgs = S(
    "SettlePointsArgs", F("wallet", PUBKEY, "whose unclaimed points move to its Points account")
)
ResultStatement = S(
    "ResultStatement",
    F("batch_start", U64),
    F("batch_end", U64),
    F("commitment", Bytes(32), "sha256 of the result's payload"),
    doc="What a trainer signs with its node key for each result (RESULT_PROOF_PREFIX || run || epoch || step || "
    "this).",
)
ReportEquivocationArgs = S(
    "ReportEquivocationArgs",
    F("index", U16, "the accused's epoch client index"),
    F("_pad", U16),
    F("step", U32),
    F("first", ResultStatement),
    F("second", ResultStatement),
)
ReportCheckArgs = S(
    "ReportCheckArgs",
    F("step", U32, "the checked step"),
    F("trainer", U16, "the checked trainer's epoch client index"),
    F("reason", CheckFailure, "what the signer, one of the check's verifiers, found"),
    F("_pad", U8),
)

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
    F(
        "endpoint",
        Bytes("ENDPOINT_LEN"),
        "the node's address (peers read it from the Endpoint account)",
    ),
)
ClientExited = S("ClientExited", F("run", PUBKEY), F("signer", PUBKEY))
WitnessSubmitted = S(
    "WitnessSubmitted",
    F("run", PUBKEY),
    F("signer", PUBKEY),
    F("step", U32),
    F("index", U16),
    F("position", U16),
    F("results_root", Bytes(32)),
    F("weights_digest", U64),
    F("metadata", WitnessMetadata),
)
StepDecided = S(
    "StepDecided",
    F("run", PUBKEY),
    F("step", U32, "the step whose applied set is now fixed"),
    F("votes", U16),
    F("_pad", U16),
    F("results_root", Bytes(32)),
)
ClientConvicted = S(
    "ClientConvicted",
    F("run", PUBKEY),
    F("signer", PUBKEY),
    F("index", U16),
    F("reason", ConvictionReason),
    F("_pad", U8),
    F("step", U32, "the step the proof is about"),
    F("forfeited", U64, "unclaimed points it lost"),
)
CheckFailed = S(
    "CheckFailed",
    F("run", PUBKEY),
    F("verifier", PUBKEY, "the reporting verifier's wallet"),
    F("step", U32, "the checked step"),
    F("trainer", U16, "the checked trainer's epoch client index"),
    F("reason", CheckFailure),
    F(
        "reports",
        U8,
        "failure reports of this check so far; a strict majority of its verifiers convicts",
    ),
)
ClientDropped = S(
    "ClientDropped", F("run", PUBKEY), F("signer", PUBKEY), F("index", U16), F("_pad", Bytes(6))
)
DisputeOpened = S(
    "DisputeOpened",
    F("run", PUBKEY),
    F("step", U32, "the disputed step"),
    F("trainer", U16),
    F("reporters", U8, "bit k: the check's k-th verifier reported a failure"),
    F("_pad", U8),
    F("seed_step", U32, "the round whose seed draws the committee"),
)
DisputeReported = S(
    "DisputeReported",
    F("run", PUBKEY),
    F("verifier", PUBKEY, "the reporting committee member's wallet"),
    F("step", U32),
    F("trainer", U16),
    F("reason", CheckFailure, "Passed, or the failure it found"),
    F("_pad", U8),
    F("fails", U16, "failure reports of the committee so far"),
    F("passes", U16, "Passed reports so far"),
    F("committee", U16, "the committee's size; a strict majority of it decides"),
    F("_pad2", U16),
)
DisputeClosed = S(
    "DisputeClosed",
    F("run", PUBKEY),
    F("step", U32),
    F("trainer", U16),
    F("outcome", DisputeOutcome),
    F("_pad", U8),
    F("fails", U16),
    F("passes", U16),
)
CheckpointUpdated = S("CheckpointUpdated", F("run", PUBKEY), F("checkpoint", Checkpoint))
RunUpdated = S("RunUpdated", F("run", PUBKEY), F("what", U8))
PointsClaimed = S(
    "PointsClaimed", F("run", PUBKEY), F("wallet", PUBKEY), F("points", U64, "moved in this claim"),
    F("total", U64, "now in the wallet's Points account"),
)  # fmt: skip

EVENTS = (RunStateChanged, ClientJoined, ClientExited, WitnessSubmitted, StepDecided, ClientDropped,
          ClientConvicted, CheckpointUpdated, RunUpdated, PointsClaimed, CheckFailed, DisputeOpened,
          DisputeReported, DisputeClosed)  # fmt: skip
ACCOUNT_TYPES = (Run, RunIndex, JoinAuthorization, Points, Endpoint)
ARG_TYPES = (InitializeRunArgs, UpdateMetadataArgs, UpdateConfigArgs, UpdateModelArgs, SetCheckpointersArgs,
             SetPausedArgs, SetJoinAuthorizationArgs, JoinRunArgs, WarmupWitnessArgs, WitnessArgs,
             HealthCheckArgs, CheckpointArgs, VoteWeightsArgs, SettlePointsArgs, ReportEquivocationArgs,
             ReportCheckArgs)  # fmt: skip
STRUCTS = (Checkpoint, LrSchedule, DistroConfig, ModelConfig, RunConfig, RunMetadata, Progress, Client,
           Witness, Round, CheckSeed, FailedCheck, Dispute, StepDecision, RoundWitnesses, EpochState, RegistryEntry,
           WitnessMetadata,
           ResultStatement, *ACCOUNT_TYPES, *ARG_TYPES, *EVENTS)  # fmt: skip

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
            _payer_user,
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
            Account(
                "endpoint",
                writable=True,
                doc='PDA ["endpoint", run, user]: written (created on the first join)',
            ),
            _system,
        ),
        JoinRunArgs,
        "Join the next epoch (again each epoch). An earlier instruction of the same transaction must be "
        'an Ed25519 signature by p2p_identity over "cohort join v2" || run || wallet || next_active (u64 LE).',
    ),
    Instruction(
        "exit_run",
        (
            _payer_user,
            _run_w,
            _slot_hashes,
            _points,
            _system,
            Account(
                "endpoint",
                writable=True,
                doc='PDA ["endpoint", run, user]: closed, its rent refunded',
            ),
        ),
        None,
        "Leave the run; frees the registry slot. Unclaimed points move to the Points account first. Refused "
        "(Banned) while a conviction's ban lasts: the entry keeps its record.",
    ),
    Instruction(
        "claim_points",
        (_payer_user, _run_w, _points, _system),
        None,
        "Move the wallet's unclaimed points into its Points account (created on the first claim).",
    ),
    Instruction(
        "settle_points",
        (
            Account(
                "payer",
                writable=True,
                signer=True,
                doc="anyone; pays the Points account's rent if new",
            ),
            _run_w,
            Account("points", writable=True, doc='PDA ["points", run, wallet]'),
            _system,
        ),
        SettlePointsArgs,
        "Move a wallet's unclaimed points into its Points account (permissionless): they then survive "
        "pruning, and the entry can be reused when the registry is full.",
    ),
    Instruction(
        "close_points",
        (
            Account(
                "wallet",
                writable=True,
                signer=True,
                doc="the Points account's wallet; receives the rent",
            ),
            Account("points", writable=True, doc='PDA ["points", run, wallet]'),
            Account("run", doc="must be closed (no longer a Run account)"),
        ),
        None,
        "Close a Points account once its run is closed, refunding its rent.",
    ),
    Instruction(
        "close_endpoint",
        (
            Account(
                "wallet",
                writable=True,
                signer=True,
                doc="the Endpoint account's wallet; receives the rent",
            ),
            Account("endpoint", writable=True, doc='PDA ["endpoint", run, wallet]'),
            Account("run", doc="closed, or a Run that no longer registers the wallet"),
        ),
        None,
        "Close an Endpoint account once its run is closed or no longer registers the wallet, refunding its rent.",
    ),
    Instruction(
        "close_join_authorization",
        (
            Account("join_authority", writable=True, signer=True, doc="receives the rent"),
            Account(
                "run",
                writable=True,
                doc="the grantee's pending join is withdrawn (or the closed run)",
            ),
            Account("authorization", writable=True, doc='PDA ["join", run, grantee]'),
        ),
        None,
        "Close a JoinAuthorization and refund its rent (the grant is revoked with it); works after the run "
        "was closed too.",
    ),
    Instruction(
        "tick",
        (_user, _run_w, _slot_hashes),
        None,
        "Advance the phase when a timeout is due; from the slot after a round's inputs froze, start a "
        "round that waits for its seed (seed_pending).",
    ),
    Instruction("warmup_witness", (_user, _run_w, _slot_hashes), WarmupWitnessArgs),
    Instruction("witness", (_user, _run_w, _slot_hashes), WitnessArgs),
    Instruction("health_check", (_user, _run_w, _slot_hashes), HealthCheckArgs),
    Instruction(
        "checkpoint",
        (_user, _run_w, _slot_hashes),
        CheckpointArgs,
        "A checkpointer sets where the weights are kept besides peers (kind, repo, revision); "
        "the weights' hash and step come only from vote_weights.",
    ),
    Instruction(
        "vote_weights",
        (_user, _run_w, _slot_hashes),
        VoteWeightsArgs,
        "A finisher of the epoch that just ended reports its checkpoint's manifest hash; the hash a "
        "strict majority of the healthy finishers reported becomes the checkpoint's.",
    ),
    Instruction(
        "report_equivocation",
        (
            _user,
            _run_w,
            _slot_hashes,
            Account(
                "instructions",
                address=INSTRUCTIONS_SYSVAR,
                doc="where the two signed statements are read",
            ),
        ),
        ReportEquivocationArgs,
        "Two earlier Ed25519 instructions of the same transaction hold the accused node key's signatures "
        "over two result statements for one step with different commitments: the member is convicted (only "
        "while the epoch runs: its points are credited when it ends).",
    ),
    Instruction(
        "report_check",
        (_user, _run_w, _slot_hashes),
        ReportCheckArgs,
        "One of the verifiers the seed drew for (step, trainer) reports that the check failed; once a strict "
        "majority of them did, a dispute opens: a larger committee drawn from a later seed replays the step and "
        "reports Passed or a failure; a strict majority of it convicts the trainer (FailedVerification) or "
        "refutes the reporters (those that claimed a replay mismatch are convicted: FalseReport).",
    ),
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
    Error("InvalidWitness", "Witness index or position is not a seat of this round"),
    Error("DuplicateWitness", "This client already holds this very record this round"),
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
        'No earlier Ed25519 instruction in which p2p_identity signs "cohort join v2" || run || wallet || join marker',
    ),
    Error("IdentityTaken", "Another wallet of this run already holds this p2p_identity"),
    Error("AlreadyJoined", "Already joined the next epoch with this p2p_identity"),
    Error("NoChange", "The instruction would change nothing"),
    Error(
        "NonCanonical",
        "Instruction arguments are not in canonical form (non-zero padding or unused bytes)",
    ),
    Error("JoinDuringWarmup", "Joins for the next epoch open when this epoch's first round starts"),
    Error("RoundOver", "The round's witness time is over"),
    Error(
        "SeedPending",
        "The next round's seed is waiting for the slot its inputs froze in to complete",
    ),
    Error("PointsUnclaimed", "Some wallets still hold unclaimed points: settle_points them first"),
    Error("RunStillOpen", "Only allowed once the run is closed"),
    Error(
        "EquivocationNotProven",
        "The transaction holds no two valid signed statements by the accused for this step",
    ),
    Error("VoteClosed", "Weights votes are taken from the epoch's end until the next epoch starts"),
    Error("NotChecked", "The seed did not draw this trainer's step for a check"),
    Error("NotAVerifier", "Signer is not one of the verifiers of this check"),
    Error(
        "CheckExpired",
        "The check's seed left the window of kept seeds, or belongs to another epoch",
    ),
    Error("DuplicateReport", "This verifier already reported this check"),
    Error("InvalidReason", "reason is not a CheckFailure a report can name"),
    Error("DisputesFull", "Every dispute slot is open: the report that would open one waits"),
    Error("DisputePending", "The dispute's committee is drawn from a seed not revealed yet"),
    Error(
        "Banned",
        "This wallet, or the node key it joins with, was convicted in this run and is barred until a later epoch",
    ),
    Error(
        "ClaimsSpent",
        "A dispute refuted this verifier's non-delivery claim this epoch: it may claim non-delivery no more",
    ),
)


def error_code(name: str) -> int:
    return 6000 + [e.name for e in ERRORS].index(name)


# --------------------------------------------------------------------------------------------------
# the program, as the shared codegen (cohort.sbf.codegen) names it in C and in the IDL

PROGRAM = ProgramAbi(
    name="coordinator",
    c_prefix="COORD",
    description="cohort coordinator: run state, phases, randomness and witness proofs",
    placeholder_address="CohortCoordinator11111111111111111111111111",
    addresses={
        "SLOT_HASHES_ID": SLOT_HASHES,
        "INSTRUCTIONS_SYSVAR_ID": INSTRUCTIONS_SYSVAR,
        "ED25519_PROGRAM_ID": ED25519_PROGRAM,
    },
    byte_constants={
        "JOIN_PROOF_PREFIX": JOIN_PROOF_PREFIX,
        "RESULT_PROOF_PREFIX": RESULT_PROOF_PREFIX,
    },
)
