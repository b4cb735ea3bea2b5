/* toolchain_probe: exercises each feature of the C -> SBF toolchain once. Instruction data starts with a
   one-byte tag selecting the handler through a .rodata table of function pointers. */
#include <sol.h>

#include "shuffle.h"

#define ERROR_BAD_ACCOUNT 6000

static const char VAULT_SEED[] = "vault";

/* Instruction data after the tag. */
static const uint8_t *payload(const SolParameters *p, uint64_t *len) {
  *len = p->data_len - 1;
  return p->data + 1;
}

/* 0: logs of each kind. */
__attribute__((noinline)) static uint64_t do_log(SolParameters *p) {
  sol_log("probe: hello from C");
  sol_log_64(1, 2, 3, 4, 5);
  sol_log_pubkey(p->program_id);
  sol_log_compute_units();
  uint64_t len;
  const uint8_t *data = payload(p, &len);
  SolBytes fields[2] = {{(const uint8_t *)"probe", 5}, {data, len}};
  sol_log_data(fields, 2);
  return SUCCESS;
}

/* The first account, which must be writable and owned by this program. */
static SolAccountInfo *own_writable(SolParameters *p) {
  if (p->ka_num < 1) return NULL;
  SolAccountInfo *a = &p->ka[0];
  if (!a->is_writable || !sol_pubkey_eq(a->owner, p->program_id)) return NULL;
  return a;
}

/* 1: bump a u64 counter at the start of a program-owned account and copy the payload after it. */
__attribute__((noinline)) static uint64_t do_write(SolParameters *p) {
  SolAccountInfo *a = own_writable(p);
  if (!a) return ERROR_BAD_ACCOUNT;
  uint64_t len;
  const uint8_t *data = payload(p, &len);
  if (a->data_len < 8 + len) return ERROR_ACCOUNT_DATA_TOO_SMALL;
  uint64_t counter;
  if (!sol_add_u64(sol_get_u64(a->data), 1, &counter)) return ERROR_ARITHMETIC_OVERFLOW;
  sol_put_u64(a->data, counter);
  sol_memcpy(a->data + 8, data, len);
  return SUCCESS;
}

/* 2: create the PDA ["vault", payer] owned by this program through a system-program CPI signed with the
   seeds, then write into it. Payload: u64 space. Accounts: payer (signer), vault, system program. */
__attribute__((noinline)) static uint64_t do_create_pda(SolParameters *p) {
  uint64_t len;
  const uint8_t *data = payload(p, &len);
  if (len != 8) return ERROR_INVALID_INSTRUCTION_DATA;
  if (p->ka_num < 3) return ERROR_NOT_ENOUGH_ACCOUNT_KEYS;
  SolAccountInfo *payer = &p->ka[0], *vault = &p->ka[1], *system = &p->ka[2];
  if (!payer->is_signer) return ERROR_MISSING_REQUIRED_SIGNATURES;
  if (!sol_is_system_program(system->key)) return ERROR_INCORRECT_PROGRAM_ID;
  uint64_t space = sol_get_u64(data);
  if (space < 8) return ERROR_INVALID_INSTRUCTION_DATA;

  SolSignerSeed seeds[3] = {{(const uint8_t *)VAULT_SEED, sizeof(VAULT_SEED) - 1},
                            {payer->key->x, SIZE_PUBKEY},
                            {NULL, 1}};
  SolPubkey expected;
  uint8_t bump;
  uint64_t status = sol_try_find_program_address(seeds, 2, p->program_id, &expected, &bump);
  if (status != SUCCESS) return status;
  if (!sol_pubkey_eq(&expected, vault->key)) return ERROR_INVALID_SEEDS;
  seeds[2].addr = &bump;
  SolSignerSeeds signer = {seeds, 3};
  SolCreateAccount create = {payer, vault, system, space, p->program_id, &signer};
  status = sol_create_account(&create);
  if (status != SUCCESS) return status;
  /* the runtime updated the account's length and owner in place */
  if (vault->data_len != space) return ERROR_INVALID_ACCOUNT_DATA;
  sol_put_u64(vault->data, 0x7661756c74ULL); /* "vault" */
  vault->data[8] = bump;
  return SUCCESS;
}

/* 3: copy the Clock sysvar (slot, unix_timestamp, epoch) into a program-owned account. */
__attribute__((noinline)) static uint64_t do_clock(SolParameters *p) {
  SolAccountInfo *a = own_writable(p);
  if (!a) return ERROR_BAD_ACCOUNT;
  if (a->data_len < 24) return ERROR_ACCOUNT_DATA_TOO_SMALL;
  SolClock clock;
  uint64_t status = sol_get_clock_sysvar(&clock);
  if (status != SUCCESS) return status;
  sol_put_u64(a->data, clock.slot);
  sol_put_u64(a->data + 8, (uint64_t)clock.unix_timestamp);
  sol_put_u64(a->data + 16, clock.epoch);
  return SUCCESS;
}

/* 4: sha256 of the payload (in two slices, to exercise multi-part hashing) as return data. */
__attribute__((noinline)) static uint64_t do_sha256(SolParameters *p) {
  uint64_t len;
  const uint8_t *data = payload(p, &len);
  uint64_t half = len / 2;
  SolBytes parts[2] = {{data, half}, {data + half, len - half}};
  uint8_t digest[32];
  uint64_t status = sol_sha256(parts, 2, digest);
  if (status != SUCCESS) return status;
  sol_set_return_data(digest, sizeof(digest));
  return SUCCESS;
}

/* 5: fail with the custom error code in the payload (u32). */
__attribute__((noinline)) static uint64_t do_fail(SolParameters *p) {
  uint64_t len;
  const uint8_t *data = payload(p, &len);
  if (len != 4) return ERROR_INVALID_INSTRUCTION_DATA;
  uint32_t code = sol_get_u32(data);
  return code == 0 ? ERROR_CUSTOM_ZERO : code;
}

/* 6: arithmetic through a second .rodata table of function pointers. Payload: u8 op, i64 a, i64 b, u64 c;
   return data: the u64 result. */
typedef uint64_t (*math_op)(uint64_t a, uint64_t b, uint64_t c, bool *ok);
static uint64_t op_sdiv(uint64_t a, uint64_t b, uint64_t c, bool *ok) {
  *ok = b != 0;
  return *ok ? (uint64_t)sol_sdiv64((int64_t)a, (int64_t)b) : 0;
}
static uint64_t op_smod(uint64_t a, uint64_t b, uint64_t c, bool *ok) {
  *ok = b != 0;
  return *ok ? (uint64_t)sol_smod64((int64_t)a, (int64_t)b) : 0;
}
static uint64_t op_mulhi(uint64_t a, uint64_t b, uint64_t c, bool *ok) {
  *ok = true;
  return sol_mulhi64(a, b);
}
static uint64_t op_muldiv(uint64_t a, uint64_t b, uint64_t c, bool *ok) {
  uint64_t out = 0;
  *ok = sol_muldiv64(a, b, c, &out);
  return out;
}
static uint64_t op_checked_mul(uint64_t a, uint64_t b, uint64_t c, bool *ok) {
  uint64_t out = 0;
  *ok = sol_mul_u64(a, b, &out);
  return out;
}
static const math_op MATH_OPS[] = {op_sdiv, op_smod, op_mulhi, op_muldiv, op_checked_mul};

__attribute__((noinline)) static uint64_t do_math(SolParameters *p) {
  uint64_t len;
  const uint8_t *data = payload(p, &len);
  if (len != 25 || data[0] >= SOL_ARRAY_SIZE(MATH_OPS)) return ERROR_INVALID_INSTRUCTION_DATA;
  bool ok = false;
  uint64_t result = MATH_OPS[data[0]](sol_get_u64(data + 1), sol_get_u64(data + 9), sol_get_u64(data + 17), &ok);
  if (!ok) return ERROR_ARITHMETIC_OVERFLOW;
  uint8_t out[8];
  sol_put_u64(out, result);
  sol_set_return_data(out, sizeof(out));
  return SUCCESS;
}

/* 7: a call into another object file: shuffle 0..n-1 with a seed. Payload: u64 seed, u8 n. */
__attribute__((noinline)) static uint64_t do_shuffle(SolParameters *p) {
  uint64_t len;
  const uint8_t *data = payload(p, &len);
  if (len != 9) return ERROR_INVALID_INSTRUCTION_DATA;
  uint8_t permutation[255];
  uint64_t n = data[8];
  probe_shuffle(sol_get_u64(data), permutation, n);
  sol_set_return_data(permutation, n);
  return SUCCESS;
}

typedef uint64_t (*handler)(SolParameters *p);
static const handler HANDLERS[] = {do_log,   do_write, do_create_pda, do_clock,
                                   do_sha256, do_fail, do_math,       do_shuffle};

uint64_t entrypoint(const uint8_t *input) {
  SolAccountInfo accounts[4];
  SolParameters params = {.ka = accounts};
  sol_deserialize(input, &params, SOL_ARRAY_SIZE(accounts));
  if (params.data_len < 1 || params.data[0] >= SOL_ARRAY_SIZE(HANDLERS)) return ERROR_INVALID_INSTRUCTION_DATA;
  return HANDLERS[params.data[0]](&params);
}
