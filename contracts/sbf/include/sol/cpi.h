/* Cross-program invocation and program-derived addresses. On-chain only. */
#pragma once
#include "entrypoint.h"
#include "error.h"
#include "math.h"
#include "mem.h"
#include "syscalls.h"
#include "types.h"

typedef struct {
  SolPubkey *pubkey;
  bool is_writable;
  bool is_signer;
} SolAccountMeta;

typedef struct {
  SolPubkey *program_id;
  SolAccountMeta *accounts;
  uint64_t account_len;
  uint8_t *data;
  uint64_t data_len;
} SolInstruction;

typedef struct {
  const uint8_t *addr;
  uint64_t len;
} SolSignerSeed;

typedef struct {
  const SolSignerSeed *addr;
  uint64_t len;
} SolSignerSeeds;

#define SOL_MAX_SEEDS 16
#define SOL_MAX_SEED_LEN 32

#ifdef __bpf__
uint64_t sol_invoke_signed_c(const SolInstruction *instruction, const SolAccountInfo *account_infos,
                             int account_infos_len, const SolSignerSeeds *signers_seeds,
                             int signers_seeds_len);
uint64_t sol_create_program_address(const SolSignerSeed *seeds, int seeds_len, const SolPubkey *program_id,
                                    SolPubkey *address);
uint64_t sol_try_find_program_address(const SolSignerSeed *seeds, int seeds_len,
                                      const SolPubkey *program_id, SolPubkey *address, uint8_t *bump_seed);
static inline uint64_t sol_invoke(const SolInstruction *instruction, const SolAccountInfo *account_infos,
                                  int account_infos_len) {
  return sol_invoke_signed_c(instruction, account_infos, account_infos_len, NULL, 0);
}

/* The system program's id is all zeros. */
static inline bool sol_is_system_program(const SolPubkey *key) {
  for (int i = 0; i < SIZE_PUBKEY; i++)
    if (key->x[i] != 0) return false;
  return true;
}

/* Lamports that keep an account of data_len bytes rent exempt, from the Rent sysvar. Its threshold is an
   f64 and BPF has no floats: decode the double and scale in integers (exact for the integer thresholds
   every cluster uses; truncating like the Rust SDK otherwise). */
static inline uint64_t sol_rent_exempt_minimum(uint64_t data_len, uint64_t *lamports) {
  struct {
    uint64_t lamports_per_byte_year;
    uint64_t exemption_threshold_bits;
    uint8_t burn_percent;
  } rent;
  uint64_t status = sol_get_rent_sysvar(&rent);
  if (status != SUCCESS) return status;
  const uint64_t account_storage_overhead = 128;
  uint64_t base;
  if (!sol_mul_u64(data_len + account_storage_overhead, rent.lamports_per_byte_year, &base))
    return ERROR_ARITHMETIC_OVERFLOW;
  uint64_t bits = rent.exemption_threshold_bits;
  if (bits == 0) {
    *lamports = 0;
    return SUCCESS;
  }
  uint64_t exponent = (bits >> 52) & 0x7ff; /* biased by 1023 */
  uint64_t mantissa = (bits & ((1ULL << 52) - 1)) | (1ULL << 52);
  if ((bits >> 63) != 0 || exponent > 1023 + 52 || exponent < 1023 - 11) return ERROR_INVALID_ARGUMENT;
  uint64_t shift = 1023 + 52 - exponent; /* value = mantissa / 2^shift */
  return sol_muldiv64(base, mantissa, 1ULL << shift, lamports) ? SUCCESS : ERROR_ARITHMETIC_OVERFLOW;
}

typedef struct {
  const SolAccountInfo *payer;       /* signer, writable: pays the rent */
  SolAccountInfo *new_account;       /* writable; a PDA signs through `seeds`; its data_len is updated */
  const SolAccountInfo *system_program;
  uint64_t space;
  const SolPubkey *owner;
  const SolSignerSeeds *seeds; /* NULL when new_account signed the transaction itself */
} SolCreateAccount;

/* System program CreateAccount through CPI, funded for rent exemption. */
static inline uint64_t sol_create_account(const SolCreateAccount *p) {
  uint64_t lamports;
  uint64_t status = sol_rent_exempt_minimum(p->space, &lamports);
  if (status != SUCCESS) return status;
  uint8_t data[4 + 8 + 8 + SIZE_PUBKEY] = {0}; /* u32 tag 0 = CreateAccount, lamports, space, owner */
  sol_put_u64(data + 4, lamports);
  sol_put_u64(data + 12, p->space);
  sol_memcpy(data + 20, p->owner->x, SIZE_PUBKEY);
  SolAccountMeta metas[2] = {{p->payer->key, true, true}, {p->new_account->key, true, true}};
  SolInstruction instruction = {p->system_program->key, metas, 2, data, sizeof(data)};
  SolAccountInfo infos[3] = {*p->payer, *p->new_account, *p->system_program};
  uint64_t result = sol_invoke_signed_c(&instruction, infos, 3, p->seeds, p->seeds ? 1 : 0);
  /* the runtime wrote the new length into the infos passed to the CPI (and the input buffer) */
  if (result == SUCCESS) p->new_account->data_len = infos[1].data_len;
  return result;
}
#endif
