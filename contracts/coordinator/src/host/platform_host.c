/* The core's platform on the host: a plain C sha256 and an in-memory event log, so Python (ctypes) can
   run the very rules the chain runs. Not thread-safe: one caller at a time. */
#include <sol/mem.h>

#include "../core/platform.h"
#include "../generated/abi.h"

/* ---- sha256 (FIPS 180-4) */

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

typedef struct {
  uint32_t h[8];
  uint8_t block[64];
  uint64_t block_len, total_len;
} Sha256;

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(Sha256 *s, const uint8_t *b) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++) w[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 | (uint32_t)b[4 * i + 2] << 8 | b[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = s->h[0], bb = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = bb, bb = a, a = t1 + t2;
  }
  s->h[0] += a, s->h[1] += bb, s->h[2] += c, s->h[3] += d, s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void sha256_update(Sha256 *s, const uint8_t *data, uint64_t len) {
  for (uint64_t i = 0; i < len; i++) {
    s->block[s->block_len++] = data[i];
    if (s->block_len == 64) {
      sha256_block(s, s->block);
      s->block_len = 0;
    }
  }
  s->total_len += len;
}

void coord_sha256(const SolBytes *parts, uint64_t count, uint8_t out[32]) {
  Sha256 s = {{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}, {0}, 0, 0};
  for (uint64_t i = 0; i < count; i++) sha256_update(&s, parts[i].addr, parts[i].len);
  uint64_t bits = s.total_len * 8;
  uint8_t pad = 0x80, zero = 0, length[8];
  sha256_update(&s, &pad, 1);
  while (s.block_len != 56) sha256_update(&s, &zero, 1);
  for (int i = 0; i < 8; i++) length[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(&s, length, 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)(s.h[i] >> (24 - 8 * j));
}

/* ---- events: appended as [u32 length][discriminator + body] for the caller to drain */

#define EVENT_LOG_CAPACITY (64 * 1024)
static uint8_t event_log[EVENT_LOG_CAPACITY];
static uint64_t event_log_len;

void coord_emit(uint64_t discriminator, const void *body, uint64_t len) {
  if (event_log_len + 4 + 8 + len > EVENT_LOG_CAPACITY) return; /* caller did not drain: drop */
  uint8_t *at = event_log + event_log_len;
  uint32_t total = (uint32_t)(8 + len);
  for (int i = 0; i < 4; i++) at[i] = (uint8_t)(total >> (8 * i));
  sol_put_u64(at + 4, discriminator);
  sol_memcpy(at + 12, body, len);
  event_log_len += 4 + total;
}

/* Copy out and clear the events emitted since the last call; returns the bytes written. */
uint64_t coord_host_take_events(uint8_t *out, uint64_t capacity) {
  uint64_t n = event_log_len < capacity ? event_log_len : capacity;
  sol_memcpy(out, event_log, n);
  event_log_len = 0;
  return n;
}

/* Sizes the Python side checks against the IDL before trusting its layout. */
uint64_t coord_host_run_size(void) { return sizeof(Run); }
