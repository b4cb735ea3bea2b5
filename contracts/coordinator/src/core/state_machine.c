/* Phases and their timeouts (psyche-reference 1.4-1.6), with round seeds nobody can compute before the
   inputs they depend on are final, fixed one round ahead so clients can train back to back, and rounds
   that follow one another in the instruction that decides a step: no transaction between them. All times
   are whole seconds of chain time. */
#include "internal.h"

const Round *coord_current_round(const Run *run) {
  return &run->epoch.rounds[run->epoch.rounds_head % COORD_NUM_ROUNDS];
}

const Round *coord_round_back(const Run *run, uint32_t back) {
  const Round *current = coord_current_round(run);
  if (back > current->height || back >= COORD_NUM_ROUNDS) return NULL;
  return &run->epoch.rounds[(run->epoch.rounds_head + COORD_NUM_ROUNDS - back) % COORD_NUM_ROUNDS];
}

const Witness *coord_round_records(const Run *run, uint32_t back) {
  if (coord_round_back(run, back) == NULL) return NULL;
  return run->witnesses[(run->epoch.rounds_head + COORD_NUM_ROUNDS - back) % COORD_NUM_ROUNDS].records;
}

/* Due when `duration` seconds have passed since `since`, and never in the second a phase began. */
static bool timed_out(int64_t since, int64_t now, uint64_t duration) {
  return now != since && now > since && (uint64_t)(now - since) >= duration;
}

bool phase_over(const Run *run, const CoordEnv *env, uint64_t duration) {
  return timed_out(run->run_state_start, env->now, duration);
}

uint64_t healthy_count(const Run *run) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < run->epoch.clients_len; i++) n += run->clients[i].state == CLIENT_STATE_HEALTHY;
  return n;
}

void change_state(Run *run, const CoordEnv *env, uint8_t to) {
  const Round *round = coord_current_round(run);
  RunStateChanged event = {0};
  event.run = *env->run_key;
  event.from_state = run->run_state;
  event.to_state = to;
  event.epoch = run->progress.epoch;
  event.step = run->progress.step;
  event.height = round->height;
  event.random_seed = round->random_seed;
  event.timestamp = env->now;
  bool rounds = to == RUN_STATE_ROUND_TRAIN || to == RUN_STATE_ROUND_WITNESS;
  run->run_state = to;
  run->run_state_start = env->now;
  run->seed_pending = false; /* a wait for a seed belongs to the phase it began in */
  run->cooldown_seeds = 0;
  if (!rounds) { /* inputs frozen at a round's start feed a later round of the same epoch, or nothing */
    run->seed_slot = 0;
    sol_memset(run->seed_mask, 0, sizeof(run->seed_mask));
  }
  coord_emit(EVENT_RUN_STATE_CHANGED, &event, sizeof(event));
}

void withdraw_all(Run *run) {
  uint32_t height = coord_current_round(run)->height;
  for (uint64_t i = 0; i < run->epoch.clients_len; i++) {
    Client *c = &run->clients[i];
    if (c->state == CLIENT_STATE_HEALTHY) {
      c->state = CLIENT_STATE_WITHDRAWN;
      c->exited_height = height;
    }
  }
  members_changed(run);
}

/* The hash of the first block at or after `slot`, when SlotHashes proves it is the first: an entry older
   than `slot` is listed too, so no block between them has aged out (SlotHashes lists the last 512 blocks,
   newest first; slots without a block are absent). False when the slot is too old to tell: then the hash
   that would serve may have been public for minutes, and the inputs freeze again instead. A binary
   search: the deciding witness of a long round would otherwise walk every block since the round began. */
static bool slot_hash_from(const CoordEnv *env, uint64_t slot, uint8_t out[32]) {
  if (env->slot_hashes == NULL || env->slot_hashes_len < 8) return false;
  uint64_t count = sol_min_u64(sol_get_u64(env->slot_hashes), (env->slot_hashes_len - 8) / 40);
  const uint8_t *entries = env->slot_hashes + 8;
  uint64_t lo = 0, hi = count; /* the first entry older than `slot` is at index lo once lo == hi */
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (sol_get_u64(entries + 40 * mid) < slot) hi = mid;
    else lo = mid + 1;
  }
  if (lo == 0 || lo == count) return false; /* no block at or after `slot` yet, or none older listed */
  sol_memcpy(out, entries + 40 * (lo - 1) + 8, 32);
  return true;
}

/* A new seed: sha256(previous seed || hash of the slot the inputs froze in)[0..8]. The instruction that
   freezes the inputs (after it, no healthy set they depend on can change) runs in that slot, whose hash
   does not exist until the slot is over: neither its sender nor anyone else can know the seed in advance,
   and no later sender can change an input. What is left is the slot leader's influence on its own block.
   No witness record feeds it: the inputs freeze when a round starts, before that round's records exist,
   and a record written after the freeze (its weights digest is free) could be ground against a known hash. */
static uint64_t derive_seed(const Run *run, const uint8_t frozen[32]) {
  uint8_t last[8], digest[32];
  sol_put_u64(last, run->last_seed);
  SolBytes parts[2] = {{last, 8}, {frozen, 32}};
  coord_sha256(parts, 2, digest);
  return sol_get_u64(digest);
}

/* The first round of an epoch also needs the second's seed at once: derived from the first's. */
static uint64_t follow_seed(uint64_t seed) {
  static const char tag[] = "cohort/next-seed";
  uint8_t le[8], digest[32];
  sol_put_u64(le, seed);
  SolBytes parts[2] = {{(const uint8_t *)tag, sizeof(tag) - 1}, {le, 8}};
  coord_sha256(parts, 2, digest);
  return sol_get_u64(digest);
}

/* Freeze the inputs of a later round's seed in this slot: the healthy clients now. */
static void freeze_inputs(Run *run, const CoordEnv *env) {
  run->seed_slot = env->slot;
  sol_memset(run->seed_mask, 0, sizeof(run->seed_mask));
  for (uint64_t i = 0; i < run->epoch.clients_len; i++)
    if (run->clients[i].state == CLIENT_STATE_HEALTHY) coord_set_bit(run->seed_mask, i);
}

/* Freeze them and wait: the next round starts from a later slot, once this one's hash exists. */
void freeze_round_inputs(Run *run, const CoordEnv *env) {
  freeze_inputs(run, env);
  run->seed_pending = true;
}

/* Round h starts with the seed and trainers fixed when round h-1 started, so every client knew its batch
   one round ahead (it trains back to back, prefetching data); the seed and trainers derived now, from the
   inputs that froze when round h-1 started (or, for an epoch's first round, when Warmup ended), are round
   h+1's. The inputs freeze again now, for round h+2: the instruction that ends round h (a later slot)
   derives its seed and starts round h+1 at once. */
static void start_round_train(Run *run, const CoordEnv *env, const uint8_t frozen[32]) {
  EpochState *epoch = &run->epoch;
  uint64_t seed = derive_seed(run, frozen);
  const Round *previous = coord_current_round(run);
  uint64_t data_index;
  uint32_t height;
  bool first = epoch->first_round;
  if (first) {
    data_index = run->progress.epoch_start_data_index;
    height = 0;
    epoch->rounds_head = 0;
  } else {
    data_index = previous->data_index + previous->batch_size;
    height = previous->height + 1;
    epoch->rounds_head = (epoch->rounds_head + 1) % COORD_NUM_ROUNDS;
  }
  Round *round = current_round(run);
  sol_memset(round, 0, sizeof(Round));
  sol_memset(current_records(run), 0, sizeof(RoundWitnesses));
  round->data_index = data_index;
  round->height = height;
  round->batch_size = coord_batch_size(&run->config, &run->model, data_index);
  if (first) {
    round->random_seed = seed;
    sol_memcpy(round->active_mask, run->seed_mask, sizeof(round->active_mask));
    run->next_seed = follow_seed(seed);
  } else {
    round->random_seed = run->next_seed;
    sol_memcpy(round->active_mask, run->next_mask, sizeof(round->active_mask));
    run->next_seed = seed;
  }
  sol_memcpy(run->next_mask, run->seed_mask, sizeof(run->next_mask));
  /* every seed is kept as it is revealed: the checks of a step are drawn from a later round's */
  if (first) record_check_seed(run, run->progress.step, round->random_seed);
  record_check_seed(run, (uint64_t)run->progress.step + 1, run->next_seed);
  for (uint64_t i = 0; i < epoch->clients_len; i++) round->active_count += coord_bit(round->active_mask, i);
  run->last_seed = seed;
  if (first) run->next_active++; /* this epoch's joins are consumed: joining again means the next epoch */
  change_state(run, env, RUN_STATE_ROUND_TRAIN);
  freeze_inputs(run, env);
}

/* The round is over: the next starts in this instruction when the inputs frozen at this round's start
   have a hash SlotHashes proves (this runs in a later slot, as a deciding witness almost always does).
   In the slot they froze in, the next round waits for a tick from a later slot; when SlotHashes no
   longer reaches back to that slot (a round of minutes), they freeze again now. */
static void start_next_round(Run *run, const CoordEnv *env) {
  uint8_t frozen[32];
  if (env->slot <= run->seed_slot) run->seed_pending = true;
  else if (slot_hash_from(env, run->seed_slot, frozen)) start_round_train(run, env, frozen);
  else freeze_round_inputs(run, env);
}

void start_waiting_for_members(Run *run, const CoordEnv *env) {
  change_state(run, env, run->progress.step >= run->config.total_steps ? RUN_STATE_FINISHED : RUN_STATE_WAITING_FOR_MEMBERS);
}

/* The k-th smallest of values[0..n) (values are reordered): quickselect, O(n) on average. */
static uint32_t kth_smallest(uint32_t *values, uint64_t n, uint64_t k) {
  uint64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    uint32_t pivot = values[lo + (hi - lo) / 2];
    uint64_t i = lo, j = hi;
    while (i <= j) {
      while (values[i] < pivot) i++;
      while (values[j] > pivot) j--;
      if (i <= j) {
        uint32_t t = values[i];
        values[i] = values[j];
        values[j] = t;
        i++;
        if (j == 0) break;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return values[k];
  }
  return values[k];
}

/* The clamps of max_share_ratio: a share stays within that ratio of MEDIAN_SHARE either way. */
static void share_bounds(const Run *run, uint64_t *lo, uint64_t *hi) {
  uint64_t ratio = run->config.max_share_ratio ? run->config.max_share_ratio : 1;
  *lo = COORD_MEDIAN_SHARE / ratio ? COORD_MEDIAN_SHARE / ratio : 1;
  *hi = COORD_MEDIAN_SHARE * ratio;
}

/* Each member's share of the rounds' batches. Its declared throughput is only a target: the median
   declared one is worth MEDIAN_SHARE, the others in proportion (a slow or far member shortens its share
   instead of stretching every round). The share it gets is the target capped at what it proved it
   delivers (RegistryEntry.proven_share; a newcomer's cap is the median's, whatever it declared), within
   max_share_ratio of the median either way: overclaiming gets no larger batch than delivery earned. */
static void assign_shares(Run *run) {
  uint32_t declared[COORD_MAX_CLIENTS];
  uint64_t n = 0;
  for (uint64_t i = 0; i < run->epoch.clients_len; i++) {
    const Client *c = &run->clients[i];
    uint32_t t = c->registry_index < run->registry_len ? run->registry[c->registry_index].throughput : 0;
    if (t) declared[n++] = t;
  }
  uint64_t lo, hi;
  share_bounds(run, &lo, &hi);
  uint64_t median = n ? kth_smallest(declared, n, n / 2) : 0;
  for (uint64_t i = 0; i < run->epoch.clients_len; i++) {
    Client *c = &run->clients[i];
    const RegistryEntry *entry = c->registry_index < run->registry_len ? &run->registry[c->registry_index] : NULL;
    uint64_t t = entry ? entry->throughput : 0;
    uint64_t share = COORD_MEDIAN_SHARE;
    if (t && median) share = (COORD_MEDIAN_SHARE * t + median / 2) / median;
    uint64_t cap = entry && entry->proven_share ? entry->proven_share : COORD_MEDIAN_SHARE;
    if (share > cap) share = cap;
    c->share = (uint16_t)(share < lo ? lo : share > hi ? hi : share);
  }
}

/* WaitingForMembers -> Warmup: freeze the epoch's members (pending joins, in registry order, up to the
   epoch capacity). If none of the previous epoch's members came back, no peer can serve the model, so a
   P2P checkpoint falls back to its repo. */
static void start_epoch(Run *run, const CoordEnv *env) {
  EpochState *epoch = &run->epoch;
  uint8_t previous_members[COORD_MAX_CLIENTS / 8] = {0};
  for (uint64_t i = 0; i < epoch->clients_len; i++)
    if (run->clients[i].registry_index < COORD_MAX_CLIENTS) coord_set_bit(previous_members, run->clients[i].registry_index);
  bool returning = false;
  uint64_t capacity = epoch_capacity(run);
  bool cold_start = epoch->cold_start_epoch;
  uint64_t members_nonce = epoch->members_nonce;
  sol_memset(epoch, 0, sizeof(EpochState));
  sol_memset(run->witnesses, 0, sizeof(run->witnesses));
  sol_memset(run->clients, 0, sizeof(run->clients));
  clear_checks(run);
  epoch->members_nonce = members_nonce + 1;
  epoch->cold_start_epoch = cold_start;
  epoch->first_round = true;
  epoch->start_step = run->progress.step;
  epoch->epoch = run->progress.epoch;
  epoch->start_timestamp = env->now;
  for (uint64_t r = 0; r < run->registry_len && epoch->clients_len < capacity; r++) {
    const RegistryEntry *entry = &run->registry[r];
    if (entry->join_marker != run->next_active) continue;
    returning |= coord_bit(previous_members, r);
    Client *c = &run->clients[epoch->clients_len++];
    c->signer = entry->signer;
    c->p2p_identity = entry->p2p_identity;
    c->state = CLIENT_STATE_HEALTHY;
    c->registry_index = (uint16_t)r;
  }
  assign_shares(run);
  Checkpoint *ck = &run->model.checkpoint;
  if (!returning && ck->kind == CHECKPOINT_KIND_P2P) ck->kind = CHECKPOINT_KIND_HUB;
  if (!returning && ck->kind == CHECKPOINT_KIND_P2P_GCS) ck->kind = CHECKPOINT_KIND_GCS;
  change_state(run, env, RUN_STATE_WARMUP);
}

/* ---- the epoch's last checks: Cooldown goes on revealing seeds

   The checks of step s are drawn from the seed of the round of s + CHECK_SEED_LAG, and the rounds after the
   epoch's last never start: without more seeds its last steps would never be checked, and a trainer that
   knows when an epoch ends would cheat on them for free. So Cooldown goes on revealing seeds: one every
   `cooldown_pace` seconds (the epoch's own mean round time: windows counted in seeds last about as long as
   in its rounds), each derived as a round's is from the hash of the slot the inputs froze in (when Cooldown
   began, then at the previous reveal), up to COOLDOWN_SEEDS of them. Reports and disputes of the epoch's
   steps are taken meanwhile; the check clock (verification.c current_step) moves with these seeds. */
static void enter_cooldown(Run *run, const CoordEnv *env) {
  change_state(run, env, RUN_STATE_COOLDOWN);
  freeze_inputs(run, env);
}

static uint64_t cooldown_pace(const Run *run) {
  uint64_t rounds = (uint64_t)coord_current_round(run)->height + 1;
  int64_t took = run->run_state_start - run->epoch.start_timestamp;
  uint64_t pace = took > 0 ? (uint64_t)took / rounds : 0;
  return pace < 1 ? 1 : pace;
}

static bool cooldown_seed_due(const Run *run, const CoordEnv *env) {
  if (run->cooldown_seeds >= COORD_COOLDOWN_SEEDS || run->seed_slot == 0) return false;
  return env->now >= run->run_state_start + (int64_t)(((uint64_t)run->cooldown_seeds + 1) * cooldown_pace(run));
}

/* The next seed, from a slot after the one the inputs froze in (ERR_SEED_PENDING in that slot); when
   SlotHashes no longer reaches back to it, the inputs freeze again now and the seed waits. */
static uint64_t reveal_cooldown_seed(Run *run, const CoordEnv *env) {
  if (env->slot <= run->seed_slot) return ERR_SEED_PENDING;
  uint8_t frozen[32];
  if (slot_hash_from(env, run->seed_slot, frozen)) {
    uint64_t seed = derive_seed(run, frozen);
    run->last_seed = seed;
    run->cooldown_seeds++;
    /* Cooldown began with progress.step the step of the newest seed revealed (the flush round's next) */
    record_check_seed(run, (uint64_t)run->progress.step + run->cooldown_seeds, seed);
  }
  freeze_inputs(run, env);
  return SUCCESS;
}

/* The round is over (its step was decided, or its witness time ran out): the next one, if any, starts. A
   step is trained in its round and attested in the next, so when the epoch must end (its time is up, or
   the run's last step is near) one more round trains nothing and only attests the last trained step:
   Cooldown then applies everything that was trained. */
void end_round(Run *run, const CoordEnv *env) {
  EpochState *epoch = &run->epoch;
  const Round *round = coord_current_round(run);
  const RunConfig *config = &run->config;
  epoch->first_round = false;
  if (run->progress.step > 0) { /* its outcome outlives the round ring: a client that lags applies it */
    StepDecision *kept = &epoch->decisions[(run->progress.step - 1) % COORD_DECISION_WINDOW];
    kept->step = run->progress.step - 1;
    kept->outcome = round->decided ? 1 : 2;
    sol_memcpy(kept->root, round->decided_root, 32);
  }
  run->progress.step++;
  if (round->witnesses_len == 0) {
    withdraw_all(run);
    enter_cooldown(run, env);
    return;
  }
  if (epoch->last_step == 0 && (timed_out(epoch->start_timestamp, env->now, config->epoch_time) ||
                                (uint64_t)run->progress.step + 1 >= config->total_steps))
    epoch->last_step = run->progress.step + 1; /* the round of this step is the flush */
  bool flushed = epoch->last_step != 0 && run->progress.step >= epoch->last_step;
  if (flushed || healthy_count(run) < config->min_clients || round->witnesses_len < coord_witness_quorum(config->witness_nodes) ||
      run->progress.step > config->total_steps || run->pending_pause) {
    enter_cooldown(run, env);
    return;
  }
  start_next_round(run, env);
}

/* The cap on a member's next shares, from what it delivered at `share` this epoch: every decided round
   of the epoch doubles it, fewer than half halve it, anything between keeps it (within the clamps). No
   decided round proves nothing either way. A dropped member is halved like one that delivered little; a
   convicted one falls to the lower clamp (it cheated, not merely fell short: it earns its way back up
   from the bottom, one doubling per epoch of full delivery). Others (withdrawn) keep theirs. */
static uint16_t next_proven_share(const Client *c, uint16_t proven, uint64_t decided, uint64_t lo, uint64_t hi) {
  uint64_t share = c->share, halved = share / 2 < lo ? lo : share / 2;
  if (c->state == CLIENT_STATE_CONVICTED) return (uint16_t)lo;
  if (c->state == CLIENT_STATE_DROPPED) return (uint16_t)halved;
  if (c->state != CLIENT_STATE_HEALTHY || decided == 0) return proven;
  if (c->delivered >= decided) return (uint16_t)(2 * share < hi ? 2 * share : hi);
  if (2 * (uint64_t)c->delivered < decided) return (uint16_t)halved;
  return (uint16_t)share;
}

/* Cooldown timeout: the epoch is over. Healthy finishers earn their share (MEDIAN_SHARE for a median
   member) per round whose decided result set named them: points follow delivered work, not the rounds
   the epoch ran. Every member's proven share follows what it delivered. */
static void end_epoch(Run *run, const CoordEnv *env) {
  const Round *round = coord_current_round(run);
  run->progress.epoch_start_data_index = round->data_index + round->batch_size;
  run->progress.epoch++;
  uint64_t lo, hi;
  share_bounds(run, &lo, &hi);
  for (uint64_t i = 0; i < run->epoch.clients_len; i++) {
    const Client *c = &run->clients[i];
    if (c->registry_index >= run->registry_len) continue; /* exited: its entry (and proven share) is gone */
    RegistryEntry *entry = &run->registry[c->registry_index];
    if (c->state == CLIENT_STATE_HEALTHY) entry->earned = sol_sat_add_u64(entry->earned, (uint64_t)c->delivered * c->share);
    entry->proven_share = next_proven_share(c, entry->proven_share, run->epoch.decided_rounds, lo, hi);
  }
  Checkpoint *ck = &run->model.checkpoint;
  if (ck->kind == CHECKPOINT_KIND_HUB || ck->kind == CHECKPOINT_KIND_DUMMY) ck->kind = CHECKPOINT_KIND_P2P;
  else if (ck->kind == CHECKPOINT_KIND_GCS) ck->kind = CHECKPOINT_KIND_P2P_GCS;
  if (run->pending_pause) {
    withdraw_all(run);
    run->pending_pause = false;
    run->epoch.cold_start_epoch = true;
    change_state(run, env, RUN_STATE_PAUSED);
    return;
  }
  run->epoch.cold_start_epoch = false;
  start_waiting_for_members(run, env);
}

/* Seed pending: any instruction from the next slot on starts the round (a plain tick does). If nobody did
   while SlotHashes could still prove which block followed the freezing slot, the inputs freeze again now:
   never a fallback to a hash that has long been public. */
static uint64_t start_pending_round(Run *run, const CoordEnv *env) {
  if (env->slot <= run->seed_slot) return ERR_SEED_PENDING;
  start_next_round(run, env);
  return SUCCESS;
}

uint64_t coord_tick(Run *run, const CoordEnv *env) {
  const RunConfig *config = &run->config;
  int64_t since = run->run_state_start;
  if (run->seed_pending && (run->run_state == RUN_STATE_WARMUP || run->run_state == RUN_STATE_ROUND_WITNESS))
    return start_pending_round(run, env);
  switch (run->run_state) {
    case RUN_STATE_WAITING_FOR_MEMBERS:
      if (pending_count(run) >= config->init_min_clients && timed_out(since, env->now, config->waiting_for_members_extra_time)) {
        start_epoch(run, env);
        return SUCCESS;
      }
      return ERR_NOTHING_TO_TICK;
    case RUN_STATE_WARMUP:
      if (healthy_count(run) < config->min_clients) {
        withdraw_all(run);
        start_waiting_for_members(run, env);
        return SUCCESS;
      }
      if (timed_out(since, env->now, config->warmup_time)) {
        freeze_round_inputs(run, env);
        return SUCCESS;
      }
      return ERR_NOTHING_TO_TICK;
    case RUN_STATE_ROUND_TRAIN:
      if (timed_out(since, env->now, config->max_round_train_time)) {
        change_state(run, env, RUN_STATE_ROUND_WITNESS);
        return SUCCESS;
      }
      return ERR_NOTHING_TO_TICK;
    case RUN_STATE_ROUND_WITNESS:
      if (timed_out(since, env->now, config->round_witness_time)) {
        end_round(run, env);
        return SUCCESS;
      }
      return ERR_NOTHING_TO_TICK;
    case RUN_STATE_COOLDOWN:
      if (timed_out(since, env->now, config->cooldown_time)) {
        end_epoch(run, env);
        return SUCCESS;
      }
      if (cooldown_seed_due(run, env)) return reveal_cooldown_seed(run, env);
      return ERR_NOTHING_TO_TICK;
    default:
      return ERR_HALTED;
  }
}

void tick_opportunistically(Run *run, const CoordEnv *env) {
  if (!coord_is_halted(run->run_state)) (void)coord_tick(run, env);
}

/* ---- pause / resume (owner) */

uint64_t coord_set_paused(Run *run, const CoordEnv *env, bool paused, const char **why) {
  if (paused) {
    if (coord_is_halted(run->run_state)) return ERR_HALTED;
    if (run->pending_pause) return ERR_NO_CHANGE;
    if (run->run_state == RUN_STATE_WAITING_FOR_MEMBERS || run->run_state == RUN_STATE_WARMUP) {
      withdraw_all(run);
      run->epoch.cold_start_epoch = true;
      change_state(run, env, RUN_STATE_PAUSED);
    } else {
      run->pending_pause = true; /* takes effect when the current round ends: Cooldown, then Paused */
    }
    return SUCCESS;
  }
  if (!coord_is_halted(run->run_state)) {
    if (!run->pending_pause) return ERR_CANNOT_RESUME;
    run->pending_pause = false; /* resuming before the pause took effect cancels it */
    return SUCCESS;
  }
  if (run->run_state == RUN_STATE_FINISHED) return ERR_CANNOT_RESUME;
  Progress progress = run->progress;
  if (run->run_state == RUN_STATE_UNINITIALIZED && progress.step == 0) progress.step = 1; /* first opening */
  uint64_t status = coord_check_config(&run->config, why);
  if (status == SUCCESS) status = coord_check_model(&run->model, why);
  if (status == SUCCESS) status = coord_check_model_fits_config(&run->model, &run->config, why);
  if (status == SUCCESS) status = coord_check_progress(&progress, why);
  if (status != SUCCESS) return status;
  run->progress = progress;
  run->next_active++; /* joins made before the pause do not carry over */
  start_waiting_for_members(run, env);
  tick_opportunistically(run, env);
  return SUCCESS;
}
