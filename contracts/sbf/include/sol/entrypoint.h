/* The program input buffer (loader v2/v3 "aligned" serialization) and its deserializer.

   u64 account count, then per account either a duplicate marker (u8 index of the original + 7 pad bytes)
   or: u8 0xff, u8 is_signer, u8 is_writable, u8 executable, u32 original_data_len, key[32], owner[32],
   u64 lamports, u64 data_len, data, 10 KiB of realloc room, padding to 8, u64 rent_epoch.
   Then u64 instruction data length, the data, and the program id. Everything is used in place (zero copy). */
#pragma once
#include "types.h"

#define SOL_MAX_PERMITTED_DATA_INCREASE (10 * 1024)
#define SOL_NON_DUP_MARKER 0xff

/* The C ABI of an account as sol_invoke_signed_c expects it (56 bytes). */
typedef struct {
  SolPubkey *key;
  uint64_t *lamports;
  uint64_t data_len;
  uint8_t *data;
  SolPubkey *owner;
  uint64_t rent_epoch;
  bool is_signer;
  bool is_writable;
  bool executable;
} SolAccountInfo;
SOL_STATIC_ASSERT(sizeof(SolAccountInfo) == 56, "SolAccountInfo ABI");

typedef struct {
  SolAccountInfo *ka;      /* accounts, in instruction order (duplicates resolved to copies) */
  uint64_t ka_num;         /* accounts deserialized into ka */
  uint64_t ka_total;       /* accounts the instruction carried (ka_num < ka_total when ka was too small) */
  const uint8_t *data;     /* instruction data */
  uint64_t data_len;
  const SolPubkey *program_id;
} SolParameters;

/* Fill params from the input buffer, writing at most ka_capacity accounts into params->ka. */
static inline void sol_deserialize(const uint8_t *input, SolParameters *params, uint64_t ka_capacity) {
  uint64_t count = *(const uint64_t *)input;
  input += sizeof(uint64_t);
  params->ka_total = count;
  params->ka_num = count < ka_capacity ? count : ka_capacity;
  for (uint64_t i = 0; i < count; i++) {
    uint8_t dup = *input;
    if (dup != SOL_NON_DUP_MARKER) {
      if (i < ka_capacity && dup < i) params->ka[i] = params->ka[dup];
      input += 8;
      continue;
    }
    SolAccountInfo *account = i < ka_capacity ? &params->ka[i] : NULL;
    if (account) {
      account->is_signer = input[1] != 0;
      account->is_writable = input[2] != 0;
      account->executable = input[3] != 0;
    }
    input += 8; /* marker, three flags, original data length */
    if (account) account->key = (SolPubkey *)input;
    input += SIZE_PUBKEY;
    if (account) account->owner = (SolPubkey *)input;
    input += SIZE_PUBKEY;
    if (account) account->lamports = (uint64_t *)input;
    input += sizeof(uint64_t);
    uint64_t data_len = *(const uint64_t *)input;
    input += sizeof(uint64_t);
    if (account) {
      account->data_len = data_len;
      account->data = (uint8_t *)input;
    }
    input += data_len + SOL_MAX_PERMITTED_DATA_INCREASE;
    input = (const uint8_t *)(((uintptr_t)input + 7) & ~(uintptr_t)7);
    if (account) account->rent_epoch = *(const uint64_t *)input;
    input += sizeof(uint64_t);
  }
  params->data_len = *(const uint64_t *)input;
  input += sizeof(uint64_t);
  params->data = input;
  input += params->data_len;
  params->program_id = (const SolPubkey *)input;
}

/* Resize an account in place (the runtime reads the serialized length back), up to 10 KiB more than it had
   when the instruction started; the caller checks that bound and keeps it rent exempt. */
static inline void sol_account_set_data_len(SolAccountInfo *account, uint64_t new_len) {
  *(uint64_t *)(account->data - sizeof(uint64_t)) = new_len;
  account->data_len = new_len;
}
