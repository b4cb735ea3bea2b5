/* The core's platform on chain: sha256 and events through syscalls. */
#include <sol.h>

#include "../core/platform.h"

void coord_sha256(const SolBytes *parts, uint64_t count, uint8_t out[32]) { sol_sha256(parts, count, out); }

/* Anchor's event format: one "Program data:" field holding discriminator || Borsh body. */
void coord_emit(uint64_t discriminator, const void *body, uint64_t len) {
  uint8_t buffer[512];
  if (len > sizeof(buffer) - 8) sol_panic();
  sol_put_u64(buffer, discriminator);
  sol_memcpy(buffer + 8, body, len);
  SolBytes field = {buffer, 8 + len};
  sol_log_data(&field, 1);
}
