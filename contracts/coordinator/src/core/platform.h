/* What the pure core needs from its surroundings. The program implements it with syscalls
   (program/platform_sbf.c); the host library with plain C (host/platform_host.c). */
#pragma once
#include <sol/types.h>

/* sha256 over the concatenation of `count` slices. */
void coord_sha256(const SolBytes *parts, uint64_t count, uint8_t out[32]);

/* Publish an Anchor-format event: 8-byte discriminator + the Borsh (= C layout) body. */
void coord_emit(uint64_t discriminator, const void *body, uint64_t len);
