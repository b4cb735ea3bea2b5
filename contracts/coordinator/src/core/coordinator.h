/* The coordinator's pure core: every rule of a run's life, with no syscalls and no I/O. The on-chain
   program and the host library (which the SDK and clients load) compile this same code, so a client can
   predict exactly what the chain will do. Each operation returns 0 or an ERR_* code from abi.h and leaves
   the Run unchanged when it fails. */
#pragma once
#include "../generated/abi.h"

/* What the chain tells an instruction about the world. */
typedef struct {
  int64_t now;                 /* Clock.unix_timestamp */
  uint64_t slot;               /* Clock.slot: the slot this instruction runs in */
  const uint8_t *slot_hashes;  /* the SlotHashes sysvar's data: u64 count, (u64 slot, hash) newest first */
  uint64_t slot_hashes_len;
  const SolPubkey *run_key;    /* the Run account's address, copied into events */
} CoordEnv;

/* ---- run lifecycle (owner) */
uint64_t coord_init(Run *run, const uint8_t run_id[COORD_RUN_ID_LEN], const SolPubkey *authority,
                    const SolPubkey *join_authority);
/* On a validation failure *why names the rule (a static string). */
uint64_t coord_update_metadata(Run *run, const CoordEnv *env, const RunMetadata *metadata, const char **why);
uint64_t coord_update_config(Run *run, const CoordEnv *env, const RunConfig *config, const Progress *progress,
                             const char **why);
uint64_t coord_update_model(Run *run, const CoordEnv *env, const ModelConfig *model, const char **why);
uint64_t coord_set_checkpointers(Run *run, const CoordEnv *env, const SolPubkey *checkpointers);
uint64_t coord_set_paused(Run *run, const CoordEnv *env, bool paused, const char **why);

/* ---- clients */
uint64_t coord_join(Run *run, const CoordEnv *env, const SolPubkey *signer, const JoinRunArgs *args);
/* *points: the wallet's unclaimed points, which the caller keeps for it (its Points account). */
uint64_t coord_exit(Run *run, const CoordEnv *env, const SolPubkey *signer, uint64_t *points);
/* Hand out a wallet's unclaimed points (*points) and zero them in the registry. */
uint64_t coord_claim_points(Run *run, const SolPubkey *signer, uint64_t *points);
/* Withdraw a wallet's join for the next epoch (its join authorization was revoked); true if it had one. */
bool coord_withdraw_pending_join(Run *run, const SolPubkey *signer);
uint64_t coord_tick(Run *run, const CoordEnv *env);
uint64_t coord_warmup_witness(Run *run, const CoordEnv *env, const SolPubkey *signer, uint16_t index);
uint64_t coord_witness(Run *run, const CoordEnv *env, const SolPubkey *signer, const WitnessArgs *args);
uint64_t coord_health_check(Run *run, const CoordEnv *env, const SolPubkey *signer, const HealthCheckArgs *args);
uint64_t coord_checkpoint(Run *run, const CoordEnv *env, const SolPubkey *signer, const Checkpoint *checkpoint);
uint64_t coord_vote_weights(Run *run, const CoordEnv *env, const SolPubkey *signer, const VoteWeightsArgs *args);
/* Anyone may move a wallet's unclaimed points (*points) out of the registry, into its Points account. */
uint64_t coord_settle_points(Run *run, const SolPubkey *wallet, uint64_t *points);
/* Whether the registry holds an entry of this wallet. */
bool coord_registered(const Run *run, const SolPubkey *wallet);
/* Whether some registry entry still holds unclaimed points (close_run refuses then). */
bool coord_points_unclaimed(const Run *run);
/* A conviction: who, why, for which step; `forfeited` is filled with the unclaimed points it lost. */
typedef struct {
  uint16_t index;
  uint8_t reason; /* CONVICTION_REASON_* */
  uint32_t step;
  uint64_t forfeited;
} Conviction;
/* Convict an epoch client (the program checked the proof): it stops being a member and forfeits its
   unclaimed points. */
uint64_t coord_convict(Run *run, const CoordEnv *env, Conviction *conviction);

/* ---- verification of honest work (verification.c) */
/* A verifier of (step, trainer) reports that its check failed; a strict majority of the check's verifiers
   opens a dispute, whose committee reports Passed or a failure: a strict majority of it convicts the trainer
   (FailedVerification) or refutes the reporters (a refuted replay-mismatch claim convicts: FalseReport). */
uint64_t coord_report_check(Run *run, const CoordEnv *env, const SolPubkey *signer, const ReportCheckArgs *args);

/* ---- validation (also used before sending); *why names the rule that failed */
uint64_t coord_check_config(const RunConfig *config, const char **why);
uint64_t coord_check_model(const ModelConfig *model, const char **why);
uint64_t coord_check_model_fits_config(const ModelConfig *model, const RunConfig *config, const char **why);
uint64_t coord_check_progress(const Progress *progress, const char **why);
uint64_t coord_check_metadata(const RunMetadata *metadata, const char **why);

/* ---- pure helpers shared with clients */
bool coord_is_halted(uint8_t run_state);
/* A strict majority of the seats: floor(witness_nodes / 2) + 1. A step's results root needs this many
   seats behind it; a trainer is unhealthy once this many seats report not holding its result. */
uint16_t coord_witness_quorum(uint16_t witness_nodes);
uint32_t coord_batch_size(const RunConfig *config, const ModelConfig *model, uint64_t data_index);
/* The round's witness order: its active clients shuffled (Fisher-Yates, keyed by the round seed and
   "witness"). out[p] = the epoch index at position p. Returns the count. */
uint64_t coord_witness_order(const Round *round, uint16_t out[COORD_MAX_CLIENTS]);
/* The position of epoch client `index` in the round's witness order (UINT64_MAX when it is not training). */
uint64_t coord_witness_position(const Round *round, uint16_t index);
/* The seat of epoch client `index` in the current round: its position when it is among the first
   witness_nodes positions, in order, whose client was healthy when the round started (and is not a
   persistent dissenter); UINT64_MAX otherwise. Seats are fixed for the round: one whose client is lost
   during it stays empty. */
uint64_t coord_witness_seat(const Run *run, uint16_t index);
/* Whether two witness records vote alike: the same results root with the same participants bitmap. */
bool coord_same_vote(const Witness *a, const Witness *b);
/* Trainers of a round in data order: out[k] = the epoch index of the k-th batch's trainer. Returns count. */
uint64_t coord_trainer_order(const Round *round, uint16_t out[COORD_MAX_CLIENTS]);
/* The round's batches in trainer order: [starts[k], ends[k]) is the k-th trainer's (coord_trainer_order),
   sized by the trainers' shares (Client.share). Returns the number of trainers. */
uint64_t coord_assignment(const Run *run, const Round *round, uint64_t starts[COORD_MAX_CLIENTS],
                          uint64_t ends[COORD_MAX_CLIENTS]);
/* The seed that draws the checks of `step` (the seed of the round of step + CHECK_SEED_LAG) while it is in
   the window of this epoch: SUCCESS and *seed; ERR_WRONG_STEP when it is not revealed yet (or never will
   be: the epoch ends first); ERR_CHECK_EXPIRED when it left the window or `step` is of an earlier epoch. */
uint64_t coord_check_seed(const Run *run, uint32_t step, uint64_t *seed);
/* Whether `seed` draws trainer `trainer`'s result of `step` for a check (verification_percent of them), and
   its verifiers: min(MAX_VERIFIERS, pool) distinct epoch indices of the pool (the members healthy when the
   seed was revealed, but the trainer; every member for a seed not kept), in order. Returns their number, 0
   when the step is not checked (or the pool holds fewer than two). */
uint64_t coord_check_plan(const Run *run, uint32_t step, uint64_t seed, uint16_t trainer,
                          uint16_t verifiers[COORD_MAX_VERIFIERS]);
/* The committee of the open dispute of (step, trainer) as a bitmap of epoch indices; returns its size, 0 when
   no such dispute is open or its seed is not revealed yet. */
uint64_t coord_dispute_committee(const Run *run, uint32_t step, uint16_t trainer,
                                 uint8_t committee[COORD_PARTICIPANT_BITMAP_LEN]);
/* Bits of a 256-bit client bitmap. */
static inline bool coord_bit(const uint8_t *bitmap, uint64_t i) { return (bitmap[i / 8] >> (i % 8)) & 1; }
static inline void coord_set_bit(uint8_t *bitmap, uint64_t i) { bitmap[i / 8] |= (uint8_t)(1u << (i % 8)); }
const Round *coord_current_round(const Run *run);
/* The round `back` rounds before the current one in this epoch, or NULL. */
const Round *coord_round_back(const Run *run, uint32_t back);
/* The witness records of a stored round (the one coord_round_back(run, back) returns). */
const Witness *coord_round_records(const Run *run, uint32_t back);
