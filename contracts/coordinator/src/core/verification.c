/* Verification of honest work: verifiers replay a trainer's step and report when it does not hold up.
   Who checks what is drawn from a round seed that hashes the slot of the instruction that decided the checked
   step (the seed of the round of step s + CHECK_SEED_LAG, derived when the round of step s + 3 starts from the
   slot the round of step s + 2 started in, the one that ended the round of step s + 1), so nobody knows
   whether a result will be checked while it can still change. A check's verifiers are a few members healthy
   when the seed was revealed. A strict majority of them opens a dispute, not a conviction: a larger committee,
   drawn from a seed fixed after the dispute opened, replays the same step, and a strict majority of it convicts
   the trainer, or refutes the reporters (those that claimed a replay mismatch are convicted themselves). */
#include "internal.h"

_Static_assert(COORD_MAX_CLIENTS <= 256, "FailedCheck.opener holds an epoch index in one byte");
_Static_assert(COORD_MAX_VERIFIERS <= 8, "FailedCheck.reporters holds one bit per verifier");
_Static_assert(COORD_DISPUTE_VERIFIERS < COORD_MAX_CLIENTS, "a committee is counted in u16 and drawn from the epoch");
_Static_assert(COORD_DISPUTE_HORIZON + 2 < COORD_CHECK_WINDOW, "a dispute's check seed stays kept while it is open");
_Static_assert(COORD_COOLDOWN_SEEDS + COORD_CHECK_SEED_LAG < COORD_CHECK_WINDOW,
               "Cooldown's seeds leave the seeds of the epoch's last steps in the window");

/* ---- the seeds, kept as they are revealed (entry of step r at r % CHECK_WINDOW), with the members healthy
   then: the verifiers a seed draws come from them, so a dropped, withdrawn or convicted member is never drawn */

void record_check_seed(Run *run, uint64_t step, uint64_t seed) {
  CheckSeed *entry = &run->check_seeds[step % COORD_CHECK_WINDOW];
  entry->step = (uint32_t)step;
  entry->seed = seed;
  sol_memset(entry->healthy, 0, sizeof(entry->healthy));
  for (uint64_t i = 0; i < run->epoch.clients_len; i++)
    if (run->clients[i].state == CLIENT_STATE_HEALTHY) coord_set_bit(entry->healthy, i);
}

void clear_checks(Run *run) {
  sol_memset(run->check_seeds, 0, sizeof(run->check_seeds));
  sol_memset(run->failed_checks, 0, sizeof(run->failed_checks));
  sol_memset(run->disputes, 0, sizeof(run->disputes));
}

/* The check clock: the step of the current round, then in Cooldown one more for each seed it revealed
   (state_machine.c): the newest seed revealed is always current_step + 1's. */
static uint64_t current_step(const Run *run) {
  return (uint64_t)run->epoch.start_step + coord_current_round(run)->height + run->cooldown_seeds;
}

/* The kept seed of the round of `round_step`: ERR_WRONG_STEP while it is not revealed (the newest revealed is
   the next round's), ERR_CHECK_EXPIRED once it left the window. */
static uint64_t revealed_seed(const Run *run, uint64_t round_step, const CheckSeed **out) {
  if (round_step > current_step(run) + 1) return ERR_WRONG_STEP;
  const CheckSeed *entry = &run->check_seeds[round_step % COORD_CHECK_WINDOW];
  if (entry->step != round_step) return ERR_CHECK_EXPIRED;
  *out = entry;
  return SUCCESS;
}

uint64_t coord_check_seed(const Run *run, uint32_t step, uint64_t *seed) {
  if (step < run->epoch.start_step) return ERR_CHECK_EXPIRED;
  const CheckSeed *entry;
  uint64_t status = revealed_seed(run, (uint64_t)step + COORD_CHECK_SEED_LAG, &entry);
  if (status == SUCCESS) *seed = entry->seed;
  return status;
}

/* ---- the plan */

/* sha256(seed_le || step_le || trainer_le || salt): bytes 0..8 decide whether the step is checked, bytes 8..16
   start the LCG that draws its verifiers ("check"); bytes 0..8 start the dispute committee's ("dispute"). */
static void check_digest(uint64_t seed, uint32_t step, uint16_t trainer, const char *salt, uint8_t digest[32]) {
  uint64_t salt_len = 0;
  while (salt[salt_len]) salt_len++;
  uint8_t input[14];
  sol_put_u64(input, seed);
  sol_put_u32(input + 8, step);
  input[12] = (uint8_t)trainer;
  input[13] = (uint8_t)(trainer >> 8);
  SolBytes parts[2] = {{input, sizeof(input)}, {(const uint8_t *)salt, salt_len}};
  coord_sha256(parts, 2, digest);
}

/* A partial Fisher-Yates over the members set in `healthy` but the trainer, in index order: the first
   min(count, pool) positions, with Psyche's LCG taking the state's high bits (state * remaining / 2^64: an
   LCG's low bits have short periods, and `state % remaining` would correlate the draws). Returns how many. */
typedef struct {
  uint16_t trainer;
  uint64_t state; /* the LCG's start */
  uint64_t count; /* how many to draw */
} Draw;

static uint64_t draw(const Run *run, const uint8_t healthy[COORD_PARTICIPANT_BITMAP_LEN], Draw how, uint16_t *out) {
  uint16_t trainer = how.trainer;
  uint64_t state = how.state, count = how.count;
  uint16_t pool[COORD_MAX_CLIENTS];
  uint64_t size = 0;
  for (uint64_t i = 0; i < run->epoch.clients_len && i < COORD_MAX_CLIENTS; i++)
    if (i != trainer && coord_bit(healthy, i)) pool[size++] = (uint16_t)i;
  count = sol_min_u64(count, size);
  for (uint64_t k = 0; k < count; k++) {
    state = lcg_next(state);
    uint64_t j = k + sol_mulhi64(state, size - k);
    uint16_t drawn = pool[j];
    pool[j] = pool[k];
    out[k] = drawn;
  }
  return count;
}

/* The members the seed of `step` was revealed with; for a seed not kept (a plan asked of an arbitrary seed, or
   by a follower whose copy of the account's tail predates the seed: its member states are still the latest,
   as members_nonce did not move), the members healthy now. */
static const uint8_t *seed_members(const Run *run, uint32_t step, uint64_t seed, uint8_t all[COORD_PARTICIPANT_BITMAP_LEN]) {
  const CheckSeed *entry = &run->check_seeds[((uint64_t)step + COORD_CHECK_SEED_LAG) % COORD_CHECK_WINDOW];
  if (entry->step == (uint64_t)step + COORD_CHECK_SEED_LAG && entry->seed == seed) return entry->healthy;
  sol_memset(all, 0, COORD_PARTICIPANT_BITMAP_LEN);
  for (uint64_t i = 0; i < run->epoch.clients_len && i < COORD_MAX_CLIENTS; i++)
    if (run->clients[i].state == CLIENT_STATE_HEALTHY) coord_set_bit(all, i);
  return all;
}

uint64_t coord_check_plan(const Run *run, uint32_t step, uint64_t seed, uint16_t trainer,
                          uint16_t verifiers[COORD_MAX_VERIFIERS]) {
  if (run->epoch.clients_len > COORD_MAX_CLIENTS || trainer >= run->epoch.clients_len) return 0;
  uint8_t digest[32], all[COORD_PARTICIPANT_BITMAP_LEN];
  check_digest(seed, step, trainer, "check", digest);
  if (sol_get_u64(digest) % 10000 >= (uint64_t)run->config.verification_percent * 100) return 0;
  uint16_t drawn[COORD_MAX_VERIFIERS];
  uint64_t count = draw(run, seed_members(run, step, seed, all), (Draw){trainer, sol_get_u64(digest + 8), COORD_MAX_VERIFIERS}, drawn);
  /* two verifiers at least: with one, a single member would open every dispute of another alone */
  if (count < 2) return 0;
  for (uint64_t k = 0; k < count; k++) verifiers[k] = drawn[k];
  return count;
}

/* ---- disputes */

/* Open: its trainer is not convicted and the round of step + DISPUTE_HORIZON is not over (the trainer keeps
   its committed states that long). Disputes are cleared with the epoch. */
static bool dispute_open(const Run *run, const Dispute *dispute) {
  return dispute->step != 0 && dispute->trainer < run->epoch.clients_len &&
         run->clients[dispute->trainer].state != CLIENT_STATE_CONVICTED &&
         current_step(run) <= (uint64_t)dispute->step + COORD_DISPUTE_HORIZON;
}

static Dispute *find_dispute(Run *run, uint32_t step, uint16_t trainer) {
  for (uint64_t i = 0; i < COORD_MAX_DISPUTES; i++) {
    Dispute *dispute = &run->disputes[i];
    if (dispute->step == step && dispute->trainer == trainer && dispute_open(run, dispute)) return dispute;
  }
  return NULL;
}

/* The committee of an open dispute once its seed is out: min(DISPUTE_VERIFIERS, pool) of the members healthy
   when that seed was revealed, but the trainer, drawn by sha256(seed || step || trainer || "dispute"). */
static uint64_t committee_of(const Run *run, const Dispute *dispute, uint8_t committee[COORD_PARTICIPANT_BITMAP_LEN],
                             uint64_t *status) {
  sol_memset(committee, 0, COORD_PARTICIPANT_BITMAP_LEN);
  const CheckSeed *entry;
  *status = revealed_seed(run, dispute->seed_step, &entry);
  if (*status == ERR_WRONG_STEP) *status = ERR_DISPUTE_PENDING;
  if (*status != SUCCESS) return 0;
  uint8_t digest[32];
  check_digest(entry->seed, dispute->step, dispute->trainer, "dispute", digest);
  uint16_t drawn[COORD_DISPUTE_VERIFIERS];
  uint64_t count = draw(run, entry->healthy, (Draw){dispute->trainer, sol_get_u64(digest), COORD_DISPUTE_VERIFIERS}, drawn);
  if (count < 2) return 0; /* one member would decide alone: nobody can, and the dispute lapses */
  for (uint64_t k = 0; k < count; k++) coord_set_bit(committee, drawn[k]);
  return count;
}

uint64_t coord_dispute_committee(const Run *run, uint32_t step, uint16_t trainer,
                                 uint8_t committee[COORD_PARTICIPANT_BITMAP_LEN]) {
  sol_memset(committee, 0, COORD_PARTICIPANT_BITMAP_LEN);
  for (uint64_t i = 0; i < COORD_MAX_DISPUTES; i++) {
    const Dispute *dispute = &run->disputes[i];
    uint64_t status;
    if (dispute->step == step && dispute->trainer == trainer && dispute_open(run, dispute))
      return committee_of(run, dispute, committee, &status);
  }
  return 0;
}

static uint64_t popcount_bitmap(const uint8_t *bitmap) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < COORD_PARTICIPANT_BITMAP_LEN; i++)
    for (uint8_t bits = bitmap[i]; bits; bits &= (uint8_t)(bits - 1)) n++;
  return n;
}

static void emit_closed(const Run *run, const CoordEnv *env, const Dispute *dispute, uint8_t outcome) {
  DisputeClosed event = {0};
  event.run = *env->run_key;
  event.step = dispute->step;
  event.trainer = dispute->trainer;
  event.outcome = outcome;
  event.fails = (uint16_t)popcount_bitmap(dispute->fails);
  event.passes = (uint16_t)popcount_bitmap(dispute->passes);
  coord_emit(EVENT_DISPUTE_CLOSED, &event, sizeof(event));
}

/* Disputes live outside the hot prefix: moving members_nonce when one opens or closes makes followers of
   the hot prefix read the whole account again. */
static void disputes_changed(Run *run) { members_changed(run); }

/* A free dispute slot (never used, or closed, or its dispute lapsed: then DisputeClosed says so), or NULL. */
static Dispute *free_dispute(Run *run, const CoordEnv *env, bool claim) {
  for (uint64_t i = 0; i < COORD_MAX_DISPUTES; i++) {
    Dispute *dispute = &run->disputes[i];
    if (dispute_open(run, dispute)) continue;
    if (claim && dispute->step != 0 && run->clients[dispute->trainer].state != CLIENT_STATE_CONVICTED)
      emit_closed(run, env, dispute, DISPUTE_OUTCOME_LAPSED);
    return dispute;
  }
  return NULL;
}

/* ---- the tallies */

/* A tally that can still convict: its check is reportable and its trainer not convicted (by equivocation). */
static bool tally_open(const Run *run, const FailedCheck *tally) {
  uint64_t seed;
  return tally->step != 0 && coord_check_seed(run, tally->step, &seed) == SUCCESS &&
         tally->trainer < run->epoch.clients_len && run->clients[tally->trainer].state != CLIENT_STATE_CONVICTED;
}

/* The tally of (step, trainer), else a free one (never used, or its check expired), else NULL. */
static FailedCheck *find_tally(Run *run, uint32_t step, uint16_t trainer) {
  FailedCheck *free = NULL;
  for (uint64_t i = 0; i < COORD_CHECK_SLOTS; i++) {
    FailedCheck *tally = &run->failed_checks[i];
    if (tally->step == step && tally->trainer == trainer) return tally;
    if (free == NULL && !tally_open(run, tally)) free = tally;
  }
  return free;
}

/* Every tally is open: evict the oldest of those opened by the verifier that opened the most, so a verifier
   flooding reports only ever evicts its own. */
static FailedCheck *evictable_tally(Run *run) {
  FailedCheck *slots = run->failed_checks;
  uint64_t best = 0, best_count = 0;
  for (uint64_t i = 0; i < COORD_CHECK_SLOTS; i++) {
    uint64_t count = 0;
    for (uint64_t j = 0; j < COORD_CHECK_SLOTS; j++) count += slots[j].opener == slots[i].opener;
    if (count > best_count || (count == best_count && slots[i].step < slots[best].step)) {
      best = i;
      best_count = count;
    }
  }
  return &slots[best];
}

static uint64_t popcount8(uint8_t bits) {
  uint64_t n = 0;
  for (; bits; bits &= (uint8_t)(bits - 1)) n++;
  return n;
}

/* A member of the dispute's committee reports its replay: Passed or a failure. A strict majority of the
   committee's size decides: failures convict the trainer (FailedVerification); passes refute the check's
   reporters, and those that claimed a replay mismatch (a claim about bytes anyone can replay) are convicted
   (FalseReport). A non-delivery claim is not refuted by the trainer serving others, so it costs nothing. */
static uint64_t report_dispute(Run *run, const CoordEnv *env, uint64_t me, Dispute *dispute,
                               const ReportCheckArgs *args) {
  uint8_t committee[COORD_PARTICIPANT_BITMAP_LEN];
  uint64_t status, size = committee_of(run, dispute, committee, &status);
  if (status != SUCCESS) return status;
  if (!coord_bit(committee, me)) return ERR_NOT_A_VERIFIER;
  if (coord_bit(dispute->fails, me) || coord_bit(dispute->passes, me)) return ERR_DUPLICATE_REPORT;
  coord_set_bit(args->reason == CHECK_FAILURE_PASSED ? dispute->passes : dispute->fails, me);
  uint64_t fails = popcount_bitmap(dispute->fails), passes = popcount_bitmap(dispute->passes), quorum = size / 2 + 1;

  DisputeReported event = {0};
  event.run = *env->run_key;
  event.verifier = run->clients[me].signer;
  event.step = args->step;
  event.trainer = args->trainer;
  event.reason = args->reason;
  event.fails = (uint16_t)fails;
  event.passes = (uint16_t)passes;
  event.committee = (uint16_t)size;
  coord_emit(EVENT_DISPUTE_REPORTED, &event, sizeof(event));

  if (fails >= quorum) {
    emit_closed(run, env, dispute, DISPUTE_OUTCOME_CONVICTED);
    for (uint64_t i = 0; i < COORD_CHECK_SLOTS; i++) /* its tallies and disputes are moot now */
      if (run->failed_checks[i].trainer == args->trainer) sol_memset(&run->failed_checks[i], 0, sizeof(FailedCheck));
    for (uint64_t i = 0; i < COORD_MAX_DISPUTES; i++)
      if (run->disputes[i].trainer == args->trainer) sol_memset(&run->disputes[i], 0, sizeof(Dispute));
    Conviction conviction = {args->trainer, CONVICTION_REASON_FAILED_VERIFICATION, args->step, 0};
    return coord_convict(run, env, &conviction);
  }
  if (passes < quorum) {
    tick_opportunistically(run, env);
    return SUCCESS;
  }
  emit_closed(run, env, dispute, DISPUTE_OUTCOME_REFUTED);
  disputes_changed(run);
  uint8_t replay = dispute->replay, reporters = dispute->reporters;
  sol_memset(dispute, 0, sizeof(Dispute));
  uint64_t seed;
  uint16_t verifiers[COORD_MAX_VERIFIERS];
  uint64_t count = 0; /* the check's seed is kept while the dispute is open (DISPUTE_HORIZON < CHECK_WINDOW) */
  if (coord_check_seed(run, args->step, &seed) == SUCCESS)
    count = coord_check_plan(run, args->step, seed, args->trainer, verifiers);
  for (uint64_t k = 0; k < count; k++) {
    if (!(reporters >> k & 1) || run->clients[verifiers[k]].state == CLIENT_STATE_CONVICTED) continue;
    if (!(replay >> k & 1)) { /* a non-delivery claim: not false for sure, but its reporter claims no more */
      Client *reporter = &run->clients[verifiers[k]];
      if (reporter->refuted_claims < 255) reporter->refuted_claims++;
      continue;
    }
    Conviction conviction = {verifiers[k], CONVICTION_REASON_FALSE_REPORT, args->step, 0};
    (void)coord_convict(run, env, &conviction);
  }
  tick_opportunistically(run, env);
  return SUCCESS;
}

static bool replay_claim(uint8_t reason) {
  return reason == CHECK_FAILURE_PAYLOAD_MISMATCH || reason == CHECK_FAILURE_STATE_MISMATCH;
}

/* In RoundTrain, RoundWitness and Cooldown, one of the check's verifiers reports: a failure of the replay
   (PayloadMismatch, StateMismatch) or of the trainer to deliver what it needs (StateNotDelivered,
   ResultNotDelivered). The report that gives a strict majority of the verifiers opens a dispute (DisputesFull
   while all MAX_DISPUTES are open: it is refused, and sent again later); once one is open for (step, trainer),
   reports go to it (report_dispute). A report about a convicted trainer changes nothing (NoChange); one about a
   dropped or withdrawn member still counts (its step may have been applied). */
uint64_t coord_report_check(Run *run, const CoordEnv *env, const SolPubkey *signer, const ReportCheckArgs *args) {
  if (run->run_state != RUN_STATE_ROUND_TRAIN && run->run_state != RUN_STATE_ROUND_WITNESS &&
      run->run_state != RUN_STATE_COOLDOWN)
    return ERR_INVALID_RUN_STATE;
  if (args->_pad != 0) return ERR_NON_CANONICAL;
  if (args->reason == CHECK_FAILURE_UNSPECIFIED || args->reason >= CHECK_FAILURE_COUNT) return ERR_INVALID_REASON;
  uint64_t me = find_epoch_client(run, signer);
  if (me == NOT_FOUND || run->clients[me].state != CLIENT_STATE_HEALTHY) return ERR_NOT_IN_EPOCH;
  if (args->trainer >= run->epoch.clients_len) return ERR_NOT_IN_EPOCH;
  if (args->trainer == me) return ERR_NOT_A_VERIFIER;
  Dispute *dispute = find_dispute(run, args->step, args->trainer);
  if (dispute != NULL) return report_dispute(run, env, me, dispute, args);
  if (args->reason == CHECK_FAILURE_PASSED) return ERR_INVALID_REASON; /* a check's verifiers report failures */
  uint64_t seed;
  uint64_t status = coord_check_seed(run, args->step, &seed);
  if (status != SUCCESS) return status;
  uint16_t verifiers[COORD_MAX_VERIFIERS];
  uint64_t count = coord_check_plan(run, args->step, seed, args->trainer, verifiers), slot = NOT_FOUND;
  if (count == 0) return ERR_NOT_CHECKED;
  for (uint64_t k = 0; k < count; k++)
    if (verifiers[k] == me) slot = k;
  if (slot == NOT_FOUND) return ERR_NOT_A_VERIFIER;
  if (run->clients[args->trainer].state == CLIENT_STATE_CONVICTED) return ERR_NO_CHANGE;
  FailedCheck *tally = find_tally(run, args->step, args->trainer);
  bool opened = tally == NULL || tally->step != args->step || tally->trainer != args->trainer;
  if (!opened && (tally->reporters >> slot & 1)) return ERR_DUPLICATE_REPORT;
  /* a refuted non-delivery claim costs its reporter the right to claim non-delivery for the rest of the epoch */
  if (!replay_claim(args->reason) && run->clients[me].refuted_claims > 0) return ERR_CLAIMS_SPENT;
  uint8_t reporters = (uint8_t)((opened ? 0 : tally->reporters) | 1u << slot);
  uint64_t reports = popcount8(reporters);
  /* the report that makes the majority opens the dispute, once (the tally stays, so nobody reports twice) */
  bool disputes = reports == count / 2 + 1;
  if (disputes && free_dispute(run, env, false) == NULL) return ERR_DISPUTES_FULL;
  if (tally == NULL) tally = evictable_tally(run);
  if (opened) {
    sol_memset(tally, 0, sizeof(FailedCheck));
    tally->step = args->step;
    tally->trainer = args->trainer;
    tally->opener = (uint8_t)me;
  }
  tally->reporters = reporters;
  if (replay_claim(args->reason)) tally->replay |= (uint8_t)(1u << slot);

  CheckFailed event = {0};
  event.run = *env->run_key;
  event.verifier = *signer;
  event.step = args->step;
  event.trainer = args->trainer;
  event.reason = args->reason;
  event.reports = (uint8_t)reports;
  coord_emit(EVENT_CHECK_FAILED, &event, sizeof(event));

  if (disputes) {
    dispute = free_dispute(run, env, true);
    sol_memset(dispute, 0, sizeof(Dispute));
    dispute->step = args->step;
    dispute->trainer = args->trainer;
    dispute->reporters = tally->reporters;
    dispute->replay = tally->replay;
    /* a round seed revealed after this one started: derived from a slot no earlier than this instruction's */
    dispute->seed_step = (uint32_t)(current_step(run) + COORD_DISPUTE_SEED_LAG);
    DisputeOpened opened_event = {0};
    opened_event.run = *env->run_key;
    opened_event.step = dispute->step;
    opened_event.trainer = dispute->trainer;
    opened_event.reporters = dispute->reporters;
    opened_event.seed_step = dispute->seed_step;
    coord_emit(EVENT_DISPUTE_OPENED, &opened_event, sizeof(opened_event));
    disputes_changed(run);
  }
  tick_opportunistically(run, env);
  return SUCCESS;
}
