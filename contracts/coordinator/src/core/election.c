/* Randomness turned into roles and work: the witness order and the data assignment, both Fisher-Yates
   shuffles of the round's active clients driven by Psyche's LCG (the seed is unbiasable, so the LCG's
   weakness as a generator costs nothing, and a whole order costs a few thousand compute units where a
   swap-or-not position cost 180 sha256 calls). */
#include "internal.h"

/* Shuffle out[0..n) in place with the LCG seeded by `state`. The index takes the state's high bits
   (j = state * i / 2^64): an LCG modulo 2^64 has short-period low bits, so Psyche's `state % i` skews the
   order (with 4 trainers the first seat went to index 3 only 8.5% of the time, not 25%). */
static void fisher_yates(uint16_t *out, uint64_t n, uint64_t state) {
  for (uint64_t i = n; i > 1; i--) {
    state = lcg_next(state);
    uint64_t j = sol_mulhi64(state, i);
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

/* Batches are consecutive, in trainer order, sized by the trainers' shares: one sequence each, the rest
   in proportion to the shares (floored), what flooring left over one more each to the first trainers. */
uint64_t coord_assignment(const Run *run, const Round *round, uint64_t starts[COORD_MAX_CLIENTS],
                          uint64_t ends[COORD_MAX_CLIENTS]) {
  uint16_t order[COORD_MAX_CLIENTS];
  uint64_t n = coord_trainer_order(round, order), total = 0, given = 0, batch = round->batch_size;
  uint64_t sizes[COORD_MAX_CLIENTS];
  for (uint64_t k = 0; k < n; k++) total += run->clients[order[k]].share ? run->clients[order[k]].share : 1;
  uint64_t rest = batch > n ? batch - n : 0;
  for (uint64_t k = 0; k < n; k++) {
    uint64_t share = run->clients[order[k]].share ? run->clients[order[k]].share : 1;
    sizes[k] = (k < batch ? 1 : 0) + rest * share / total;
    given += sizes[k];
  }
  for (uint64_t k = 0; k < n && given < batch; k++, given++) sizes[k]++;
  uint64_t at = round->data_index;
  for (uint64_t k = 0; k < n; k++) {
    starts[k] = at;
    ends[k] = at + sizes[k];
    at = ends[k];
  }
  return n;
}
