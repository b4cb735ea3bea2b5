/* Basic types shared by on-chain (bpfel) and host builds. No libc: the compiler's own type macros. */
#pragma once

typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __SIZE_TYPE__ size_t;
typedef __UINTPTR_TYPE__ uintptr_t;

#ifndef __cplusplus
typedef _Bool bool;
#define true 1
#define false 0
#endif

#define NULL ((void *)0)
#define UINT64_MAX 0xffffffffffffffffULL
#define UINT32_MAX 0xffffffffU
#define INT64_MAX 0x7fffffffffffffffLL
#define INT64_MIN (-INT64_MAX - 1)

#define SOL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define SOL_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)

/* A 32-byte account address (ed25519 public key or program-derived address). */
#define SIZE_PUBKEY 32
typedef struct {
  uint8_t x[SIZE_PUBKEY];
} SolPubkey;

/* A byte slice, as the syscalls take them (sha256 inputs, log_data fields). */
typedef struct {
  const uint8_t *addr;
  uint64_t len;
} SolBytes;
