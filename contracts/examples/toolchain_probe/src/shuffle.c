#include "shuffle.h"

uint64_t probe_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void probe_shuffle(uint64_t seed, uint8_t *out, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) out[i] = (uint8_t)i;
  uint64_t state = seed;
  for (uint64_t i = n; i > 1; i--) {
    uint64_t j = probe_splitmix64(&state) % i;
    uint8_t tmp = out[i - 1];
    out[i - 1] = out[j];
    out[j] = tmp;
  }
}
