/* Memory helpers. The BPF backend never emits memcpy/memset calls itself (big copies are a compile error),
   so copies go through the syscalls, which are also far cheaper than byte loops. */
#pragma once
#include "syscalls.h"
#include "types.h"

#ifdef __bpf__
static inline void sol_memcpy(void *dst, const void *src, uint64_t n) { sol_memcpy_(dst, src, n); }
static inline void sol_memmove(void *dst, const void *src, uint64_t n) { sol_memmove_(dst, src, n); }
static inline void sol_memset(void *dst, uint8_t c, uint64_t n) { sol_memset_(dst, c, n); }
static inline int32_t sol_memcmp(const void *a, const void *b, uint64_t n) {
  int32_t result = 0;
  sol_memcmp_(a, b, n, &result);
  return result;
}
#else
static inline void sol_memcpy(void *dst, const void *src, uint64_t n) { __builtin_memcpy(dst, src, n); }
static inline void sol_memmove(void *dst, const void *src, uint64_t n) { __builtin_memmove(dst, src, n); }
static inline void sol_memset(void *dst, uint8_t c, uint64_t n) { __builtin_memset(dst, c, n); }
static inline int32_t sol_memcmp(const void *a, const void *b, uint64_t n) { return __builtin_memcmp(a, b, n); }
#endif

static inline bool sol_pubkey_eq(const SolPubkey *a, const SolPubkey *b) {
  return sol_memcmp(a->x, b->x, SIZE_PUBKEY) == 0;
}

/* Little-endian loads and stores at any alignment (instruction data and packed buffers). */
static inline uint64_t sol_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline void sol_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void sol_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t sol_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
