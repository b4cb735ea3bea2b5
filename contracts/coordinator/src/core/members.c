/* Who takes part: the registry of wallets (joins, exits, pruning), the epoch's members, health checks
   and rewards bookkeeping. */
#include "internal.h"

uint64_t find_registry(const Run *run, const SolPubkey *signer) {
  for (uint64_t i = 0; i < run->registry_len && i < COORD_MAX_CLIENTS; i++)
    if (sol_pubkey_eq(&run->registry[i].signer, signer)) return i;
  return NOT_FOUND;
}

bool coord_registered(const Run *run, const SolPubkey *wallet) { return find_registry(run, wallet) != NOT_FOUND; }

uint64_t find_epoch_client(const Run *run, const SolPubkey *signer) {
  for (uint64_t i = 0; i < run->epoch.clients_len && i < COORD_MAX_CLIENTS; i++)
    if (sol_pubkey_eq(&run->clients[i].signer, signer)) return i;
  return NOT_FOUND;
}

uint64_t pending_count(const Run *run) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < run->registry_len; i++) n += run->registry[i].join_marker == run->next_active;
  return n;
}

/* Every member of an epoch must get at least one sequence per round, so an epoch holds at most
   global_batch_size_start clients (Psyche let trainers go without data and then dropped them). */
uint64_t epoch_capacity(const Run *run) {
  uint64_t start = run->config.global_batch_size_start;
  return start < COORD_MAX_CLIENTS ? start : COORD_MAX_CLIENTS;
}

uint64_t coord_init(Run *run, const uint8_t run_id[COORD_RUN_ID_LEN], const SolPubkey *authority,
                    const SolPubkey *join_authority) {
  sol_memset(run, 0, sizeof(Run));
  run->version = COORD_VERSION;
  run->run_state = RUN_STATE_UNINITIALIZED;
  sol_memcpy(run->run_id, run_id, COORD_RUN_ID_LEN);
  run->authority = *authority;
  run->join_authority = *join_authority;
  run->next_active = 1;
  return SUCCESS;
}

/* The epoch a join made now is for: the next one while an epoch runs (Warmup to Cooldown), else the one that
   starts next (progress.epoch counted up when the last one ended). Bans are kept in these numbers. */
static uint64_t joining_epoch(const Run *run) {
  uint8_t s = run->run_state;
  bool running = s == RUN_STATE_WARMUP || s == RUN_STATE_ROUND_TRAIN || s == RUN_STATE_ROUND_WITNESS || s == RUN_STATE_COOLDOWN;
  return (uint64_t)run->progress.epoch + (running ? 1 : 0);
}

/* A conviction's record still bars its wallet and node key from the epoch a join now is for. */
static bool banned(const Run *run, const RegistryEntry *entry) { return entry->banned_until > joining_epoch(run); }

/* Remove registry entry r by moving the last entry into its place; epoch members follow the move. */
static void registry_remove(Run *run, uint64_t r) {
  uint64_t last = run->registry_len - 1;
  for (uint64_t i = 0; i < run->epoch.clients_len; i++) {
    Client *c = &run->clients[i];
    if (c->registry_index == r) c->registry_index = COORD_NO_REGISTRY;
    else if (c->registry_index == last) c->registry_index = (uint16_t)r;
  }
  if (r != last) run->registry[r] = run->registry[last];
  sol_memset(&run->registry[last], 0, sizeof(RegistryEntry));
  run->registry_len--;
}

/* A slot to reuse when the registry is full: the entry that joined longest ago, among those neither
   pending, nor a healthy member of the running epoch, nor holding unclaimed points (anyone can settle
   those into the wallet's Points account first: settle_points, so such entries cannot lock the registry). */
static uint64_t stale_registry_entry(const Run *run) {
  uint8_t members[COORD_MAX_CLIENTS / 8] = {0};
  bool running = !coord_is_halted(run->run_state) && run->run_state != RUN_STATE_WAITING_FOR_MEMBERS;
  for (uint64_t i = 0; running && i < run->epoch.clients_len; i++) {
    const Client *c = &run->clients[i];
    if (c->state == CLIENT_STATE_HEALTHY && c->registry_index < COORD_MAX_CLIENTS) coord_set_bit(members, c->registry_index);
  }
  uint64_t best = NOT_FOUND;
  for (uint64_t r = 0; r < run->registry_len; r++) {
    if (run->registry[r].join_marker == run->next_active || coord_bit(members, r) || run->registry[r].earned) continue;
    if (banned(run, &run->registry[r])) continue; /* the record of a conviction lasts its ban */
    if (best == NOT_FOUND || run->registry[r].join_marker < run->registry[best].join_marker) best = r;
  }
  return best;
}

/* A node address: printable ASCII up to the first NUL, only NULs after it (one encoding per address). */
static bool endpoint_is_canonical(const uint8_t endpoint[COORD_ENDPOINT_LEN]) {
  uint64_t n = 0;
  while (n < COORD_ENDPOINT_LEN && endpoint[n]) {
    if (endpoint[n] < 0x20 || endpoint[n] > 0x7e) return false;
    n++;
  }
  for (uint64_t i = n; i < COORD_ENDPOINT_LEN; i++)
    if (endpoint[i]) return false;
  return true;
}

/* The registry entry of another wallet that holds this node id, if any: results and points are
   attributed by node id, so one id must mean one wallet. */
static bool identity_taken(const Run *run, const SolPubkey *signer, const SolPubkey *p2p_identity) {
  for (uint64_t i = 0; i < run->registry_len; i++)
    if (sol_pubkey_eq(&run->registry[i].p2p_identity, p2p_identity) && !sol_pubkey_eq(&run->registry[i].signer, signer))
      return true;
  return false;
}

/* The wallet, or the node key, was convicted and its ban is not over (a node key moved to a fresh wallet
   stays barred, and so does the wallet with a fresh key). */
static bool join_barred(const Run *run, const SolPubkey *signer, const SolPubkey *p2p_identity) {
  for (uint64_t i = 0; i < run->registry_len; i++) {
    const RegistryEntry *entry = &run->registry[i];
    if ((sol_pubkey_eq(&entry->signer, signer) || sol_pubkey_eq(&entry->p2p_identity, p2p_identity)) && banned(run, entry))
      return true;
  }
  return false;
}

/* The node's key is proven by the program (an Ed25519 instruction in the same transaction, over a message
   that names the join marker, so it is good for this joining window only); the core checks what is about
   the run. The endpoint goes to the wallet's Endpoint account (the program writes it) and ClientJoined. */
uint64_t coord_join(Run *run, const CoordEnv *env, const SolPubkey *signer, const JoinRunArgs *args) {
  if (run->run_state == RUN_STATE_FINISHED) return ERR_FINISHED;
  /* Paused too: resuming voids every earlier join, so accepting one now would be a silent no-op */
  if (run->run_state == RUN_STATE_UNINITIALIZED || run->run_state == RUN_STATE_PAUSED) return ERR_HALTED;
  /* The epoch's members are fixed, but "next epoch" only begins with the first round (a Warmup that
     falls back to WaitingForMembers keeps its members' joins), so a join now would be lost: refuse it. */
  if (run->run_state == RUN_STATE_WARMUP) return ERR_JOIN_DURING_WARMUP;
  if (!endpoint_is_canonical(args->endpoint)) return ERR_ENDPOINT_INVALID;
  if (args->_pad != 0) return ERR_NON_CANONICAL;
  if (join_barred(run, signer, &args->p2p_identity)) return ERR_BANNED;
  if (identity_taken(run, signer, &args->p2p_identity)) return ERR_IDENTITY_TAKEN;
  uint64_t r = find_registry(run, signer);
  bool already_pending = r != NOT_FOUND && run->registry[r].join_marker == run->next_active;
  if (already_pending && sol_pubkey_eq(&run->registry[r].p2p_identity, &args->p2p_identity)) return ERR_ALREADY_JOINED;
  if (!already_pending && pending_count(run) >= epoch_capacity(run)) return ERR_RUN_FULL;
  if (r == NOT_FOUND) {
    if (run->registry_len >= COORD_MAX_CLIENTS) {
      uint64_t stale = stale_registry_entry(run);
      if (stale == NOT_FOUND) return ERR_REGISTRY_FULL;
      registry_remove(run, stale);
    }
    r = run->registry_len++;
    sol_memset(&run->registry[r], 0, sizeof(RegistryEntry));
    run->registry[r].signer = *signer;
  }
  run->registry[r].p2p_identity = args->p2p_identity;
  run->registry[r].join_marker = run->next_active;
  run->registry[r].throughput = args->throughput;
  ClientJoined event;
  event.run = *env->run_key;
  event.signer = *signer;
  event.p2p_identity = args->p2p_identity;
  sol_memcpy(event.endpoint, args->endpoint, COORD_ENDPOINT_LEN);
  coord_emit(EVENT_CLIENT_JOINED, &event, sizeof(event));
  tick_opportunistically(run, env);
  return SUCCESS;
}

uint64_t coord_claim_points(Run *run, const SolPubkey *signer, uint64_t *points) {
  uint64_t r = find_registry(run, signer);
  if (r == NOT_FOUND) return ERR_NOT_A_CLIENT;
  if (run->registry[r].earned == 0) return ERR_NO_CHANGE;
  *points = run->registry[r].earned;
  run->registry[r].earned = 0;
  return SUCCESS;
}

uint64_t coord_settle_points(Run *run, const SolPubkey *wallet, uint64_t *points) {
  return coord_claim_points(run, wallet, points); /* the same move; the program lets anyone pay for it */
}

bool coord_points_unclaimed(const Run *run) {
  for (uint64_t r = 0; r < run->registry_len; r++)
    if (run->registry[r].earned) return true;
  return false;
}

/* The registry entry that keeps a convicted member's record: its own, or, if it exited, a fresh one (it may
   have joined again since: then that one). NOT_FOUND only when all MAX_CLIENTS entries must stay. */
static uint64_t conviction_entry(Run *run, Client *c) {
  if (c->registry_index < run->registry_len) return c->registry_index;
  uint64_t r = find_registry(run, &c->signer);
  if (r == NOT_FOUND) {
    if (run->registry_len >= COORD_MAX_CLIENTS) {
      uint64_t stale = stale_registry_entry(run);
      if (stale == NOT_FOUND) return NOT_FOUND;
      registry_remove(run, stale);
    }
    r = run->registry_len++;
    sol_memset(&run->registry[r], 0, sizeof(RegistryEntry));
    run->registry[r].signer = c->signer;
  }
  c->registry_index = (uint16_t)r;
  return r;
}

/* Convictions are taken only while the epoch runs (Warmup to Cooldown; report_check's window too), so every
   conviction of a member comes before its epoch's points are credited (at the epoch's end, to healthy members
   only): points vest when they are credited, and claiming, settling or exiting early moves none a conviction
   could still take. A conviction forfeits the epoch's points (a convicted member is not credited), what the
   registry entry holds, and bars the wallet and the node key it was convicted with for conviction_ban_epochs
   epochs after this one (RegistryEntry.banned_until, kept while the ban lasts: joins and slashing read it). */
uint64_t coord_convict(Run *run, const CoordEnv *env, Conviction *conviction) {
  uint8_t s = run->run_state;
  if (s != RUN_STATE_WARMUP && s != RUN_STATE_ROUND_TRAIN && s != RUN_STATE_ROUND_WITNESS && s != RUN_STATE_COOLDOWN)
    return ERR_INVALID_RUN_STATE; /* the epoch is over: its points were credited */
  if (conviction->index >= run->epoch.clients_len) return ERR_NOT_IN_EPOCH;
  Client *c = &run->clients[conviction->index];
  if (c->state == CLIENT_STATE_CONVICTED) return ERR_NO_CHANGE;
  if (c->state == CLIENT_STATE_HEALTHY) c->exited_height = coord_current_round(run)->height;
  c->state = CLIENT_STATE_CONVICTED;
  conviction->forfeited = 0;
  uint64_t r = conviction_entry(run, c);
  if (r != NOT_FOUND) {
    RegistryEntry *entry = &run->registry[r];
    conviction->forfeited = entry->earned;
    entry->earned = 0;
    if (entry->join_marker == run->next_active) entry->join_marker = 0; /* its join for the next epoch is void */
    entry->p2p_identity = c->p2p_identity; /* the key that cheated is the one barred */
    uint64_t until = (uint64_t)run->epoch.epoch + 1 + run->config.conviction_ban_epochs;
    if (until > 0xFFFFFFFFu) until = 0xFFFFFFFFu;
    if (until > entry->banned_until) entry->banned_until = (uint32_t)until; /* never shortens a ban */
  }
  members_changed(run);
  ClientConvicted event = {0};
  event.run = *env->run_key;
  event.signer = c->signer;
  event.index = conviction->index;
  event.reason = conviction->reason;
  event.step = conviction->step;
  event.forfeited = conviction->forfeited;
  coord_emit(EVENT_CLIENT_CONVICTED, &event, sizeof(event));
  tick_opportunistically(run, env);
  return SUCCESS;
}

bool coord_withdraw_pending_join(Run *run, const SolPubkey *signer) {
  uint64_t r = find_registry(run, signer);
  if (r == NOT_FOUND || run->registry[r].join_marker != run->next_active) return false;
  run->registry[r].join_marker = 0;
  return true;
}

/* Leave voluntarily (Psyche had no such instruction): stop training from the next round, and free the
   registry slot. The points earned so far go to the caller, which keeps them in the wallet's Points
   account. */
uint64_t coord_exit(Run *run, const CoordEnv *env, const SolPubkey *signer, uint64_t *points) {
  uint64_t r = find_registry(run, signer);
  if (r == NOT_FOUND) return ERR_NOT_A_CLIENT;
  if (banned(run, &run->registry[r])) return ERR_BANNED; /* its record stays until the ban is over */
  *points = run->registry[r].earned;
  uint64_t i = find_epoch_client(run, signer);
  if (i != NOT_FOUND && run->clients[i].state == CLIENT_STATE_HEALTHY && run->run_state != RUN_STATE_WAITING_FOR_MEMBERS &&
      !coord_is_halted(run->run_state)) {
    run->clients[i].state = CLIENT_STATE_WITHDRAWN;
    run->clients[i].exited_height = coord_current_round(run)->height;
    members_changed(run);
  }
  registry_remove(run, r);
  ClientExited event = {*env->run_key, *signer};
  coord_emit(EVENT_CLIENT_EXITED, &event, sizeof(event));
  tick_opportunistically(run, env);
  return SUCCESS;
}

/* The participants bitmap of a decided round's decision: that of the records that decided it (a strict
   majority of the seats voted the decided root with one bitmap; no other bitmap with that root can have
   as many records). NULL when the round is undecided. */
static const uint8_t *decided_participants(const Run *run, const Round *round, const Witness *records) {
  if (!round->decided) return NULL;
  uint16_t quorum = coord_witness_quorum(run->config.witness_nodes);
  for (uint64_t w = 0; w < round->witnesses_len; w++) {
    if (sol_memcmp(records[w].results_root, round->decided_root, 32) != 0) continue;
    uint64_t same = 0;
    for (uint64_t v = 0; v < round->witnesses_len; v++) same += coord_same_vote(&records[v], &records[w]);
    if (same >= quorum) return records[w].participants;
  }
  return NULL;
}

/* Drop clients the witnesses of the round after `args->step` did not see (that round is over: the report
   names the step it reports on, so it reads the records it was computed from even when a round started
   since). When that round decided, health follows the decided set: a trainer of the step is unhealthy
   exactly when the decision's bitmap leaves it out. Otherwise it is unhealthy when a strict majority of
   the seats submitted a record that leaves it out: no minority of witnesses (one of two, a censor among
   three) can evict anyone, and a seat that never reported, or whose member was convicted, counts for
   nobody. All listed clients must be unhealthy, or nothing happens. */
uint64_t coord_health_check(Run *run, const CoordEnv *env, const SolPubkey *signer, const HealthCheckArgs *args) {
  if (run->run_state != RUN_STATE_ROUND_TRAIN && run->run_state != RUN_STATE_ROUND_WITNESS) return ERR_INVALID_RUN_STATE;
  if (run->seed_pending) return ERR_SEED_PENDING;
  uint64_t me = find_epoch_client(run, signer);
  if (me == NOT_FOUND || run->clients[me].state != CLIENT_STATE_HEALTHY) return ERR_NOT_IN_EPOCH;
  if (args->_pad != 0) return ERR_NON_CANONICAL;
  uint64_t current_step = (uint64_t)run->epoch.start_step + coord_current_round(run)->height;
  if ((uint64_t)args->step + 2 > current_step) return ERR_WRONG_STEP; /* the round attesting it is not over */
  uint32_t back = (uint32_t)(current_step - args->step);
  const Round *witnessed = coord_round_back(run, back - 1), *trained = coord_round_back(run, back);
  if (witnessed == NULL || trained == NULL) return ERR_INVALID_RUN_STATE;
  const Witness *records = coord_round_records(run, back - 1);
  const uint8_t *decided = decided_participants(run, witnessed, records);
  if (args->count == 0 || args->count > COORD_MAX_HEALTH_CHECKS) return ERR_INVALID_HEALTH_CHECK;
  /* unused indices are zero: one encoding per check */
  if (!bytes_are_zero((const uint8_t *)(args->indices + args->count), (COORD_MAX_HEALTH_CHECKS - args->count) * 2))
    return ERR_NON_CANONICAL;
  uint16_t quorum = coord_witness_quorum(run->config.witness_nodes);
  uint8_t listed[COORD_MAX_CLIENTS / 8] = {0};
  for (uint64_t k = 0; k < args->count; k++) {
    uint16_t index = args->indices[k];
    if (index >= run->epoch.clients_len || coord_bit(listed, index)) return ERR_INVALID_HEALTH_CHECK;
    if (run->clients[index].state != CLIENT_STATE_HEALTHY || !coord_bit(trained->active_mask, index))
      return ERR_INVALID_HEALTH_CHECK;
    if (decided != NULL) {
      if (coord_bit(decided, index)) return ERR_INVALID_HEALTH_CHECK;
    } else {
      uint64_t missed = 0;
      for (uint64_t w = 0; w < witnessed->witnesses_len; w++)
        missed += run->clients[records[w].index].state != CLIENT_STATE_CONVICTED && !coord_bit(records[w].participants, index);
      if (missed < quorum) return ERR_INVALID_HEALTH_CHECK;
    }
    coord_set_bit(listed, index);
  }
  uint32_t height = coord_current_round(run)->height;
  for (uint64_t k = 0; k < args->count; k++) {
    Client *c = &run->clients[args->indices[k]];
    c->state = CLIENT_STATE_DROPPED;
    c->exited_height = height;
    ClientDropped event = {0};
    event.run = *env->run_key;
    event.signer = c->signer;
    event.index = args->indices[k];
    coord_emit(EVENT_CLIENT_DROPPED, &event, sizeof(event));
  }
  members_changed(run);
  tick_opportunistically(run, env);
  return SUCCESS;
}
