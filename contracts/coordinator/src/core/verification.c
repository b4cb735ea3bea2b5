/* Verification of honest work: verifiers replay a trainer's step and report when it does not hold up.
   Who checks what is drawn from a round seed that is revealed only once the checked step was decided (the
   seed of the round of step s + CHECK_SEED_LAG, derived when the round of step s + 2 starts), so a trainer
   cannot tell whether a result will be checked while it can still change it. A check's verifiers are a few
   other members; a strict majority of them convicts, so one lying verifier convicts nobody. */
#include "internal.h"

_Static_assert(COORD_MAX_CLIENTS <= 256, "FailedCheck.opener holds an epoch index in one byte");
_Static_assert(COORD_MAX_VERIFIERS <= 8, "FailedCheck.reporters holds one bit per verifier");

/* ---- the seeds, kept as they are revealed (entry of step r at r % CHECK_WINDOW) */

void record_check_seed(Run *run, uint64_t step, uint64_t seed) {
  CheckSeed *entry = &run->check_seeds[step % COORD_CHECK_WINDOW];
  entry->step = (uint32_t)step;
  entry->seed = seed;
}

void clear_checks(Run *run) {
  sol_memset(run->check_seeds, 0, sizeof(run->check_seeds));
  sol_memset(run->failed_checks, 0, sizeof(run->failed_checks));
}

uint64_t coord_check_seed(const Run *run, uint32_t step, uint64_t *seed) {
  uint64_t round_step = (uint64_t)step + COORD_CHECK_SEED_LAG;
  /* the newest seed revealed: the next round's (the current round trains start_step + height) */
  uint64_t newest = (uint64_t)run->epoch.start_step + coord_current_round(run)->height + 1;
  if (step < run->epoch.start_step) return ERR_CHECK_EXPIRED;
  if (round_step > newest) return ERR_WRONG_STEP;
  const CheckSeed *entry = &run->check_seeds[round_step % COORD_CHECK_WINDOW];
  if (entry->step != round_step) return ERR_CHECK_EXPIRED;
  *seed = entry->seed;
  return SUCCESS;
}

/* ---- the plan */

/* sha256(seed_le || step_le || trainer_le || "check"): bytes 0..8 decide whether the step is checked,
   bytes 8..16 start the LCG that draws its verifiers. */
static void check_digest(uint64_t seed, uint32_t step, uint16_t trainer, uint8_t digest[32]) {
  static const char salt[] = "check"; /* its own stream, apart from the data order and the witness order */
  uint8_t input[14];
  sol_put_u64(input, seed);
  sol_put_u32(input + 8, step);
  input[12] = (uint8_t)trainer;
  input[13] = (uint8_t)(trainer >> 8);
  SolBytes parts[2] = {{input, sizeof(input)}, {(const uint8_t *)salt, sizeof(salt) - 1}};
  coord_sha256(parts, 2, digest);
}

/* The draw is a partial Fisher-Yates over the pool of epoch indices without the trainer, whose position p
   holds p below the trainer and p + 1 from it, except where an earlier draw moved a value (kept aside). */
typedef struct {
  uint16_t trainer;
  uint64_t moves;
  uint64_t at[COORD_MAX_VERIFIERS], value[COORD_MAX_VERIFIERS];
} Pool;

static uint64_t pool_get(const Pool *pool, uint64_t position) {
  for (uint64_t m = 0; m < pool->moves; m++)
    if (pool->at[m] == position) return pool->value[m];
  return position < pool->trainer ? position : position + 1;
}

static void pool_set(Pool *pool, uint64_t position, uint64_t value) {
  for (uint64_t m = 0; m < pool->moves; m++)
    if (pool->at[m] == position) {
      pool->value[m] = value;
      return;
    }
  pool->at[pool->moves] = position;
  pool->value[pool->moves++] = value;
}

uint64_t coord_check_plan(const Run *run, uint32_t step, uint64_t seed, uint16_t trainer,
                          uint16_t verifiers[COORD_MAX_VERIFIERS]) {
  uint64_t clients = run->epoch.clients_len;
  /* two verifiers at least: a check of a two-member epoch would let one member convict the other alone */
  if (clients < 3 || clients > COORD_MAX_CLIENTS || trainer >= clients) return 0;
  uint8_t digest[32];
  check_digest(seed, step, trainer, digest);
  if (sol_get_u64(digest) % 10000 >= (uint64_t)run->config.verification_percent * 100) return 0;
  uint64_t size = clients - 1, count = sol_min_u64(COORD_MAX_VERIFIERS, size), state = sol_get_u64(digest + 8);
  Pool pool = {trainer, 0, {0}, {0}};
  for (uint64_t k = 0; k < count; k++) {
    state = lcg_next(state);
    /* the state's high bits pick (state * remaining / 2^64): an LCG's low bits have short periods, and
       `state % remaining` would correlate the draws (a check of 5 members' third verifier followed the first) */
    uint64_t j = k + sol_mulhi64(state, size - k);
    uint64_t drawn = pool_get(&pool, j);
    pool_set(&pool, j, pool_get(&pool, k)); /* the swap; position k is never read again */
    verifiers[k] = (uint16_t)drawn;
  }
  return count;
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

/* In RoundTrain, RoundWitness and Cooldown, one of the check's verifiers reports: a failure of the replay
   (PayloadMismatch, StateMismatch) or of the trainer to deliver what it needs (StateNotDelivered,
   ResultNotDelivered). A strict majority of the verifiers reporting the same check convicts; a report about a
   convicted trainer changes nothing (NoChange), one about a dropped or withdrawn member still counts (its
   step may have been applied, and its unclaimed points are forfeited as for an equivocation). */
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
  if (tally == NULL) tally = evictable_tally(run);
  if (opened) {
    tally->step = args->step;
    tally->trainer = args->trainer;
    tally->reporters = 0;
    tally->opener = (uint8_t)me;
  }
  tally->reporters |= (uint8_t)(1u << slot);
  uint64_t reports = popcount8(tally->reporters);

  CheckFailed event = {0};
  event.run = *env->run_key;
  event.verifier = *signer;
  event.step = args->step;
  event.trainer = args->trainer;
  event.reason = args->reason;
  event.reports = (uint8_t)reports;
  coord_emit(EVENT_CHECK_FAILED, &event, sizeof(event));

  if (reports < count / 2 + 1) {
    tick_opportunistically(run, env);
    return SUCCESS;
  }
  for (uint64_t i = 0; i < COORD_CHECK_SLOTS; i++) /* its other tallies are moot now */
    if (run->failed_checks[i].trainer == args->trainer) sol_memset(&run->failed_checks[i], 0, sizeof(FailedCheck));
  Conviction conviction = {args->trainer, CONVICTION_REASON_FAILED_VERIFICATION, args->step, 0};
  return coord_convict(run, env, &conviction);
}
