/* Helpers shared by the core's files; not part of its API. */
#pragma once
#include <sol/error.h>
#include <sol/math.h>
#include <sol/mem.h>

#include "coordinator.h"
#include "platform.h"

#define COORD_NO_REGISTRY 0xffff
#define NOT_FOUND UINT64_MAX

static inline bool bytes_are_zero(const uint8_t *bytes, uint64_t n) {
  for (uint64_t i = 0; i < n; i++)
    if (bytes[i]) return false;
  return true;
}

/* Psyche's LCG, the generator behind every shuffle (the seeds it starts from are unbiasable). */
static inline uint64_t lcg_next(uint64_t state) { return state * 6364136223846793005ULL + 1442695040888963407ULL; }

static inline bool pubkey_is_zero(const SolPubkey *key) { return bytes_are_zero(key->x, SIZE_PUBKEY); }

static inline Round *current_round(Run *run) { return &run->epoch.rounds[run->epoch.rounds_head % COORD_NUM_ROUNDS]; }
static inline Witness *current_records(Run *run) { return run->witnesses[run->epoch.rounds_head % COORD_NUM_ROUNDS].records; }

/* state_machine.c */
void change_state(Run *run, const CoordEnv *env, uint8_t to);
/* The next round is decided: freeze its inputs now; a tick in a later slot starts it (the seed). */
void freeze_round_inputs(Run *run, const CoordEnv *env);
void end_round(Run *run, const CoordEnv *env); /* the round is over: the next starts (or waits for a seed), or Cooldown */
/* True once `duration` seconds of the current phase have passed. */
bool phase_over(const Run *run, const CoordEnv *env, uint64_t duration);
void start_waiting_for_members(Run *run, const CoordEnv *env);
void withdraw_all(Run *run);
uint64_t healthy_count(const Run *run);
/* A member's state changed (or the list did): clients re-read the member list when this moves. */
static inline void members_changed(Run *run) { run->epoch.members_nonce++; }
/* Tick as part of another instruction: a due transition happens, "nothing due" is not an error. */
void tick_opportunistically(Run *run, const CoordEnv *env);

/* verification.c */
/* A round seed was revealed (the round of `step`'s): checks of step - CHECK_SEED_LAG may now be reported. */
void record_check_seed(Run *run, uint64_t step, uint64_t seed);
void clear_checks(Run *run);

/* members.c */
uint64_t find_registry(const Run *run, const SolPubkey *signer);
uint64_t find_epoch_client(const Run *run, const SolPubkey *signer);
uint64_t pending_count(const Run *run);
uint64_t epoch_capacity(const Run *run);
