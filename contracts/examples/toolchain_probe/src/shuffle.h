/* A deterministic shuffle: pure C, built both for SBF and for the host, so tests can check that the chain
   and a Python caller compute the very same permutation. */
#pragma once
#include <sol/types.h>

/* splitmix64: one step of the generator, advancing *state. */
uint64_t probe_splitmix64(uint64_t *state);

/* Fill out[0..n) with a permutation of 0..n-1 drawn by Fisher-Yates from `seed`. */
void probe_shuffle(uint64_t seed, uint8_t *out, uint64_t n);
