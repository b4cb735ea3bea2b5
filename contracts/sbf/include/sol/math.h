/* Integer helpers for code that must run on SBPF v0: no signed division (clang refuses it for BPF), no
   128-bit multiply (no __multi3), and checked arithmetic that reports overflow instead of wrapping.
   Pure and portable: the host build uses the very same code. */
#pragma once
#include "types.h"

/* a + b, a - b into *out; return false on overflow and leave *out untouched. */
static inline bool sol_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  uint64_t sum = a + b;
  if (sum < a) return false;
  *out = sum;
  return true;
}
static inline bool sol_sub_u64(uint64_t a, uint64_t b, uint64_t *out) {
  if (b > a) return false;
  *out = a - b;
  return true;
}
static inline uint64_t sol_sat_add_u64(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
static inline uint64_t sol_sat_sub_u64(uint64_t a, uint64_t b) { return b > a ? 0 : a - b; }
static inline uint64_t sol_min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t sol_max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Ceiling division; callers guarantee d != 0. */
static inline uint64_t sol_div_ceil_u64(uint64_t n, uint64_t d) { return n / d + (n % d != 0); }

/* Signed division and remainder, truncating toward zero like C99. INT64_MIN / -1 saturates to INT64_MAX. */
static inline int64_t sol_sdiv64(int64_t a, int64_t b) {
  bool negative = (a < 0) != (b < 0);
  uint64_t ua = a < 0 ? (uint64_t)0 - (uint64_t)a : (uint64_t)a;
  uint64_t ub = b < 0 ? (uint64_t)0 - (uint64_t)b : (uint64_t)b;
  uint64_t q = ua / ub;
  if (!negative && q > (uint64_t)INT64_MAX) return INT64_MAX;
  return negative ? (int64_t)((uint64_t)0 - q) : (int64_t)q;
}
static inline int64_t sol_smod64(int64_t a, int64_t b) {
  uint64_t ua = a < 0 ? (uint64_t)0 - (uint64_t)a : (uint64_t)a;
  uint64_t ub = b < 0 ? (uint64_t)0 - (uint64_t)b : (uint64_t)b;
  uint64_t r = ua % ub;
  return a < 0 ? (int64_t)((uint64_t)0 - r) : (int64_t)r;
}

/* The high 64 bits of the 128-bit product a * b, from four 32x32 partial products. */
static inline uint64_t sol_mulhi64(uint64_t a, uint64_t b) {
  uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32;
  uint64_t b_lo = b & 0xffffffffu, b_hi = b >> 32;
  uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

/* a * b into *out; false on overflow. (The textbook `b > UINT64_MAX / a` test is pattern-matched by LLVM
   into a 128-bit multiply, which BPF cannot call, so overflow is read from the high half instead.) */
static inline bool sol_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  if (sol_mulhi64(a, b) != 0) return false;
  *out = a * b;
  return true;
}

/* floor(a * b / d) with a 128-bit intermediate; false if d == 0 or the quotient exceeds 64 bits.
   Restoring long division of the 128-bit product, one quotient bit per step. */
static inline bool sol_muldiv64(uint64_t a, uint64_t b, uint64_t d, uint64_t *out) {
  if (d == 0) return false;
  uint64_t hi = sol_mulhi64(a, b), lo = a * b;
  if (hi >= d) return false;
  uint64_t rem = hi, quotient = 0;
  for (int i = 63; i >= 0; i--) {
    uint64_t carry = rem >> 63;
    rem = (rem << 1) | ((lo >> i) & 1);
    quotient <<= 1;
    if (carry || rem >= d) {
      rem -= d;
      quotient |= 1;
    }
  }
  *out = quotient;
  return true;
}
