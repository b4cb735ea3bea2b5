/* Randomness turned into roles and work: the witness election (swap-or-not shuffle), the data
   assignment (Fisher-Yates driven by an LCG, as Psyche does), and the witnesses' Bloom filters. */
#include "internal.h"

#define SHUFFLE_ROUNDS 90

static void sha256_2(const void *a, uint64_t a_len, const void *b, uint64_t b_len, uint8_t out[32]) {
  SolBytes parts[2] = {{(const uint8_t *)a, a_len}, {(const uint8_t *)b, b_len}};
  coord_sha256(parts, 2, out);
}

/* Ethereum-style swap-or-not: a permutation of 0..n-1 that maps one index in O(rounds) hashes.
   seed32 = sha256(seed_le), key = sha256(seed32 || salt). */
uint64_t coord_shuffled_index(uint64_t index, uint64_t n, uint64_t seed, const char *salt, uint64_t salt_len) {
  if (n <= 1 || index >= n) return index;
  uint8_t seed_le[8], seed32[32], key[32];
  sol_put_u64(seed_le, seed);
  SolBytes one = {seed_le, 8};
  coord_sha256(&one, 1, seed32);
  sha256_2(seed32, 32, salt, salt_len, key);
  for (uint64_t round = 0; round < SHUFFLE_ROUNDS; round++) {
    uint8_t r = (uint8_t)round, digest[32];
    sha256_2(key, 32, &r, 1, digest);
    uint64_t pivot = sol_get_u64(digest) % n;
    uint64_t flip = (pivot + n - index) % n;
    uint64_t pos = index > flip ? index : flip;
    uint8_t suffix[5] = {r, 0, 0, 0, 0};
    uint64_t block = pos / 256;
    for (int i = 0; i < 4; i++) suffix[1 + i] = (uint8_t)(block >> (8 * i));
    sha256_2(key, 32, suffix, 5, digest);
    if ((digest[(pos % 256) / 8] >> (pos % 8)) & 1) index = flip;
  }
  return index;
}

/* Rank of an active client among the round's active clients (its position before shuffling). */
static uint64_t active_rank(const Round *round, uint16_t index) {
  uint64_t rank = 0;
  for (uint64_t i = 0; i < index; i++) rank += coord_bit(round->active_mask, i);
  return rank;
}

uint64_t coord_witness_position(const Round *round, uint16_t index) {
  if (index >= COORD_MAX_CLIENTS || !coord_bit(round->active_mask, index)) return UINT64_MAX;
  static const char salt[] = "witness";
  return coord_shuffled_index(active_rank(round, index), round->active_count, round->random_seed, salt, sizeof(salt) - 1);
}

uint64_t coord_trainer_order(const Round *round, uint16_t out[COORD_MAX_CLIENTS]) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < COORD_MAX_CLIENTS; i++)
    if (coord_bit(round->active_mask, i)) out[n++] = (uint16_t)i;
  uint64_t state = round->random_seed;
  for (uint64_t i = n; i > 1; i--) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t j = state % i;
    uint16_t tmp = out[i - 1];
    out[i - 1] = out[j];
    out[j] = tmp;
  }
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

/* ---- Bloom filter: 4096 bits, 10 positions of 12 bits taken from sha256(salt_le || item). The salt is
   chosen by each witness after the commitments are fixed, so no one can grind an item into collisions. */

static void bloom_positions(uint64_t salt, const uint8_t item[32], uint16_t out[COORD_BLOOM_HASHES]) {
  uint8_t salt_le[8], digest[32];
  sol_put_u64(salt_le, salt);
  sha256_2(salt_le, 8, item, 32, digest);
  for (int i = 0; i < COORD_BLOOM_HASHES; i++)
    out[i] = (uint16_t)((digest[2 * i] | digest[2 * i + 1] << 8) % (COORD_BLOOM_BYTES * 8));
}

void coord_bloom_insert(uint8_t bloom[COORD_BLOOM_BYTES], uint64_t salt, const uint8_t item[32]) {
  uint16_t positions[COORD_BLOOM_HASHES];
  bloom_positions(salt, item, positions);
  for (int i = 0; i < COORD_BLOOM_HASHES; i++) coord_set_bit(bloom, positions[i]);
}

bool coord_bloom_contains(const uint8_t bloom[COORD_BLOOM_BYTES], uint64_t salt, const uint8_t item[32]) {
  uint16_t positions[COORD_BLOOM_HASHES];
  bloom_positions(salt, item, positions);
  for (int i = 0; i < COORD_BLOOM_HASHES; i++)
    if (!coord_bit(bloom, positions[i])) return false;
  return true;
}
