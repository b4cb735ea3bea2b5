/* Randomness turned into roles and work: the witness order and the data assignment, both Fisher-Yates
   shuffles of the round's active clients driven by Psyche's LCG (the seed is unbiasable, so the LCG's
   weakness as a generator costs nothing, and a whole order costs a few thousand compute units where a
   swap-or-not position cost 180 sha256 calls). */
#include "internal.h"

#define LCG_A 6364136223846793005ULL
#define LCG_C 1442695040888963407ULL

/* Shuffle out[0..n) in place with the LCG seeded by `state`. */
static void fisher_yates(uint16_t *out, uint64_t n, uint64_t state) {
  for (uint64_t i = n; i > 1; i--) {
    state = state * LCG_A + LCG_C;
    uint64_t j = state % i;
    uint16_t tmp = out[i - 1];
    out[i - 1] = out[j];
    out[j] = tmp;
  }
}

static uint64_t active_clients(const Round *round, uint16_t out[COORD_MAX_CLIENTS]) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < COORD_MAX_CLIENTS; i++)
    if (coord_bit(round->active_mask, i)) out[n++] = (uint16_t)i;
  return n;
}

uint64_t coord_witness_order(const Round *round, uint16_t out[COORD_MAX_CLIENTS]) {
  static const char salt[] = "witness"; /* its own stream: the order is not the data order */
  uint8_t seed_le[8], digest[32];
  sol_put_u64(seed_le, round->random_seed);
  SolBytes parts[2] = {{seed_le, 8}, {(const uint8_t *)salt, sizeof(salt) - 1}};
  coord_sha256(parts, 2, digest);
  uint64_t n = active_clients(round, out);
  fisher_yates(out, n, sol_get_u64(digest));
  return n;
}

uint64_t coord_witness_position(const Round *round, uint16_t index) {
  if (index >= COORD_MAX_CLIENTS || !coord_bit(round->active_mask, index)) return UINT64_MAX;
  uint16_t order[COORD_MAX_CLIENTS];
  uint64_t n = coord_witness_order(round, order);
  for (uint64_t p = 0; p < n; p++)
    if (order[p] == index) return p;
  return UINT64_MAX;
}

uint64_t coord_trainer_order(const Round *round, uint16_t out[COORD_MAX_CLIENTS]) {
  uint64_t n = active_clients(round, out);
  fisher_yates(out, n, round->random_seed);
  return n;
}

/* Batches are consecutive: the first batch_size % trainers batches hold one sequence more. */
void coord_batch_interval(const Round *round, uint64_t trainers, uint64_t k, uint64_t *start, uint64_t *end) {
  if (trainers == 0 || k >= trainers) {
    *start = *end = round->data_index;
    return;
  }
  uint64_t base = round->batch_size / trainers, extra = round->batch_size % trainers;
  *start = round->data_index + k * base + (k < extra ? k : extra);
  *end = *start + base + (k < extra ? 1 : 0);
}
