/* Anchor's IDL instructions, so Anchor tooling and the Solana Explorer find a program's IDL on chain like
   any Anchor program's. On-chain only. A program includes this header and dispatches the tag:

     case SOL_ANCHOR_IDL_IX_TAG: return sol_anchor_idl(&params, &IDL_ERRORS);

   with `static const SolAnchorIdlErrors IDL_ERRORS = SOL_ANCHOR_IDL_ERRORS;` (its own error codes).

   Anchor's IDL account protocol. Instruction data: the 8-byte tag, a u8 variant, then its Borsh fields:
   0 Create { data_len: u64 }, 2 Write { data: Vec<u8> }, 4 SetAuthority { new_authority: Pubkey }, 5 Close,
   6 Resize { data_len: u64 } (an IDL past what one Create may allocate grows 10 KiB a call, as Anchor's).
   The account lives at create_with_seed(base, "anchor:idl", program) with base = the program's PDA of no
   seeds, and holds: discriminator (sha256("account:IdlAccount")[..8]), authority, u32 length, then the
   zlib-compressed IDL JSON. Stricter than Anchor: only the program's upgrade authority may create it
   (Anchor lets whoever comes first own it), so Create also takes the program data account. Anyone may
   send lamports to any address, so a funded but still empty, system-owned IDL address is taken over
   (the rent shortfall, then AllocateWithSeed) instead of blocking publication for good. */
#pragma once
#include "cpi.h"

/* The first 8 bytes of every IDL instruction (Anchor's IDL_IX_TAG, little-endian). */
#define SOL_ANCHOR_IDL_IX_TAG 0x0a69e9a778bcf440ULL

/* The program's own codes for what the IDL instructions refuse (each program numbers its errors). */
typedef struct {
  uint64_t invalid_instruction; /* an IDL variant not offered */
  uint64_t invalid_instruction_data;
  uint64_t missing_accounts;
  uint64_t account_not_writable;
  uint64_t missing_signature;
  uint64_t wrong_account_owner;
  uint64_t wrong_account_size;
  uint64_t wrong_discriminator;
  uint64_t wrong_pda;
  uint64_t already_initialized;
  uint64_t unauthorized; /* not the upgrade authority (Create) or the IDL's authority */
  uint64_t arithmetic_overflow;
  uint64_t duplicate_account; /* Close into the IDL account itself */
  uint64_t wrong_program;     /* not this program, not the System program, not a loader v3 program */
} SolAnchorIdlErrors;

/* The table from the ERR_* names that cohort's schema codegen emits in every program's generated header. */
#define SOL_ANCHOR_IDL_ERRORS                                \
  {.invalid_instruction = ERR_INVALID_INSTRUCTION,           \
   .invalid_instruction_data = ERR_INVALID_INSTRUCTION_DATA, \
   .missing_accounts = ERR_MISSING_ACCOUNTS,                 \
   .account_not_writable = ERR_ACCOUNT_NOT_WRITABLE,         \
   .missing_signature = ERR_MISSING_SIGNATURE,               \
   .wrong_account_owner = ERR_WRONG_ACCOUNT_OWNER,           \
   .wrong_account_size = ERR_WRONG_ACCOUNT_SIZE,             \
   .wrong_discriminator = ERR_WRONG_DISCRIMINATOR,           \
   .wrong_pda = ERR_WRONG_PDA,                               \
   .already_initialized = ERR_ALREADY_INITIALIZED,           \
   .unauthorized = ERR_UNAUTHORIZED,                         \
   .arithmetic_overflow = ERR_ARITHMETIC_OVERFLOW,           \
   .duplicate_account = ERR_DUPLICATE_ACCOUNT,               \
   .wrong_program = ERR_WRONG_PROGRAM}

#ifdef __bpf__
#define SOL_IDL_DISCRIMINATOR_LEN 8
#define SOL_IDL_ACCOUNT_DISCRIMINATOR 0xa421c56702a6248cULL
#define SOL_IDL_HEADER (SOL_IDL_DISCRIMINATOR_LEN + SIZE_PUBKEY + 4)
#define SOL_IDL_MAX_SPACE 10000 /* what one CreateAccountWithSeed may allocate (Anchor's bound too) */
#define SOL_IDL_SEED "anchor:idl"
#define SOL_IDL_SEED_LEN 10
#define SOL_IDL_TRY(expr)                   \
  do {                                      \
    uint64_t status_ = (expr);              \
    if (status_ != SUCCESS) return status_; \
  } while (0)

enum { SOL_IDL_CREATE = 0, SOL_IDL_WRITE = 2, SOL_IDL_SET_AUTHORITY = 4, SOL_IDL_CLOSE = 5, SOL_IDL_RESIZE = 6 };

static const SolPubkey SOL_LOADER_V3 = {{2,   168, 246, 145, 78,  136, 161, 176, 226, 16, 21,
                                         62,  247, 99,  174, 43,  0,   194, 185, 61,  22, 193,
                                         36,  210, 192, 83,  122, 16,  4,   128, 0,   0}};

/* The program's upgrade authority, from its program account and program data account (loader v3:
   program = u32 2 | programdata key; programdata = u32 3 | u64 slot | Option<Pubkey> authority). */
static inline uint64_t sol_idl_upgrade_authority(const SolParameters *p, const SolAccountInfo *program,
                                                 const SolAccountInfo *data, const SolAnchorIdlErrors *e,
                                                 const SolPubkey **authority) {
  if (!sol_pubkey_eq(program->key, p->program_id) || !program->executable) return e->wrong_program;
  if (!sol_pubkey_eq(program->owner, &SOL_LOADER_V3) || !sol_pubkey_eq(data->owner, &SOL_LOADER_V3))
    return e->wrong_account_owner;
  if (program->data_len < 4 + SIZE_PUBKEY || sol_get_u32(program->data) != 2) return e->wrong_program;
  if (sol_memcmp(program->data + 4, data->key->x, SIZE_PUBKEY) != 0) return e->wrong_pda;
  if (data->data_len < 13 + SIZE_PUBKEY || sol_get_u32(data->data) != 3) return e->wrong_program;
  if (data->data[12] != 1) return e->unauthorized; /* immutable program: nobody may publish */
  *authority = (const SolPubkey *)(data->data + 13);
  return SUCCESS;
}

/* [from (signer, writable), idl (writable), base, system_program, program, program_data] */
static inline __attribute__((noinline)) uint64_t sol_idl_create(SolParameters *p, const uint8_t *body,
                                                                uint64_t body_len, const SolAnchorIdlErrors *e) {
  if (body_len != 8) return e->invalid_instruction_data;
  if (p->ka_num < 6) return e->missing_accounts;
  SolAccountInfo *from = &p->ka[0], *idl = &p->ka[1], *base = &p->ka[2], *system = &p->ka[3];
  if (!from->is_signer) return e->missing_signature;
  if (!from->is_writable || !idl->is_writable) return e->account_not_writable;
  const SolPubkey *authority;
  SOL_IDL_TRY(sol_idl_upgrade_authority(p, &p->ka[4], &p->ka[5], e, &authority));
  if (!sol_pubkey_eq(authority, from->key)) return e->unauthorized;
  if (!sol_is_system_program(system->key)) return e->wrong_program;

  SolPubkey expected;
  uint8_t bump;
  const SolSignerSeed no_seeds[1] = {{(const uint8_t *)SOL_IDL_SEED, 0}};
  SOL_IDL_TRY(sol_try_find_program_address(no_seeds, 0, p->program_id, &expected, &bump));
  if (!sol_pubkey_eq(&expected, base->key)) return e->wrong_pda;
  const SolBytes parts[3] = {{base->key->x, SIZE_PUBKEY}, {(const uint8_t *)SOL_IDL_SEED, SOL_IDL_SEED_LEN},
                             {p->program_id->x, SIZE_PUBKEY}};
  SOL_IDL_TRY(sol_sha256(parts, 3, expected.x));
  if (!sol_pubkey_eq(&expected, idl->key)) return e->wrong_pda;
  if (idl->data_len != 0 || (*idl->lamports != 0 && !sol_is_system_program(idl->owner)))
    return e->already_initialized;

  uint64_t data_len = sol_get_u64(body);
  if (data_len > SOL_IDL_MAX_SPACE - SOL_IDL_HEADER) return e->invalid_instruction_data;
  uint64_t space = SOL_IDL_HEADER + data_len, lamports;
  SOL_IDL_TRY(sol_rent_exempt_minimum(space, &lamports));
  const SolSignerSeed seed = {&bump, 1};
  const SolSignerSeeds signer = {&seed, 1};
  SolAccountInfo infos[4] = {*from, *idl, *base, *system};
  if (*idl->lamports == 0) {
    /* System CreateAccountWithSeed: u32 3 | base | u64 seed length | seed | lamports | space | owner */
    uint8_t data[4 + SIZE_PUBKEY + 8 + SOL_IDL_SEED_LEN + 8 + 8 + SIZE_PUBKEY] = {3};
    uint8_t *at = data + 4;
    sol_memcpy(at, base->key->x, SIZE_PUBKEY);
    sol_put_u64(at += SIZE_PUBKEY, SOL_IDL_SEED_LEN);
    sol_memcpy(at += 8, SOL_IDL_SEED, SOL_IDL_SEED_LEN);
    sol_put_u64(at += SOL_IDL_SEED_LEN, lamports);
    sol_put_u64(at += 8, space);
    sol_memcpy(at + 8, p->program_id->x, SIZE_PUBKEY);
    SolAccountMeta metas[3] = {{from->key, true, true}, {idl->key, true, false}, {base->key, false, true}};
    SolInstruction instruction = {system->key, metas, 3, data, sizeof(data)};
    SOL_IDL_TRY(sol_invoke_signed_c(&instruction, infos, 4, &signer, 1));
  } else {
    if (*idl->lamports < lamports) { /* System Transfer: u32 2 | lamports */
      uint8_t transfer[4 + 8] = {2};
      sol_put_u64(transfer + 4, lamports - *idl->lamports);
      SolAccountMeta metas[2] = {{from->key, true, true}, {idl->key, true, false}};
      SolInstruction instruction = {system->key, metas, 2, transfer, sizeof(transfer)};
      SOL_IDL_TRY(sol_invoke_signed_c(&instruction, infos, 4, NULL, 0));
    }
    /* System AllocateWithSeed: u32 9 | base | u64 seed length | seed | space | owner (allocates, assigns) */
    uint8_t data[4 + SIZE_PUBKEY + 8 + SOL_IDL_SEED_LEN + 8 + SIZE_PUBKEY] = {9};
    uint8_t *at = data + 4;
    sol_memcpy(at, base->key->x, SIZE_PUBKEY);
    sol_put_u64(at += SIZE_PUBKEY, SOL_IDL_SEED_LEN);
    sol_memcpy(at += 8, SOL_IDL_SEED, SOL_IDL_SEED_LEN);
    sol_put_u64(at += SOL_IDL_SEED_LEN, space);
    sol_memcpy(at + 8, p->program_id->x, SIZE_PUBKEY);
    SolAccountMeta metas[2] = {{idl->key, true, false}, {base->key, false, true}};
    SolInstruction instruction = {system->key, metas, 2, data, sizeof(data)};
    SOL_IDL_TRY(sol_invoke_signed_c(&instruction, infos, 4, &signer, 1));
  }
  idl->data_len = infos[1].data_len;
  if (idl->data_len != space) return e->wrong_account_size;
  sol_put_u64(idl->data, SOL_IDL_ACCOUNT_DISCRIMINATOR);
  sol_memcpy(idl->data + SOL_IDL_DISCRIMINATOR_LEN, from->key->x, SIZE_PUBKEY);
  sol_memset(idl->data + SOL_IDL_DISCRIMINATOR_LEN + SIZE_PUBKEY, 0, 4);
  return SUCCESS;
}

/* [idl (writable), authority (signer)]: the IDL account, signed for by its authority. */
static inline uint64_t sol_idl_load_account(const SolParameters *p, uint64_t accounts, const SolAnchorIdlErrors *e) {
  if (p->ka_num < accounts) return e->missing_accounts;
  const SolAccountInfo *idl = &p->ka[0], *authority = &p->ka[1];
  if (!sol_pubkey_eq(idl->owner, p->program_id)) return e->wrong_account_owner;
  if (idl->data_len < SOL_IDL_HEADER) return e->wrong_account_size;
  if (sol_get_u64(idl->data) != SOL_IDL_ACCOUNT_DISCRIMINATOR) return e->wrong_discriminator;
  if (!idl->is_writable) return e->account_not_writable;
  if (!authority->is_signer) return e->missing_signature;
  return sol_memcmp(idl->data + SOL_IDL_DISCRIMINATOR_LEN, authority->key->x, SIZE_PUBKEY) == 0 ? SUCCESS
                                                                                                : e->unauthorized;
}

/* Append bytes to the stored IDL: Borsh Vec<u8> (u32 length + bytes). */
static inline __attribute__((noinline)) uint64_t sol_idl_write(SolParameters *p, const uint8_t *body,
                                                               uint64_t body_len, const SolAnchorIdlErrors *e) {
  SOL_IDL_TRY(sol_idl_load_account(p, 2, e));
  if (body_len < 4 || body_len - 4 != sol_get_u32(body)) return e->invalid_instruction_data;
  SolAccountInfo *idl = &p->ka[0];
  uint8_t *length = idl->data + SOL_IDL_DISCRIMINATOR_LEN + SIZE_PUBKEY;
  uint64_t stored = sol_get_u32(length), added = body_len - 4;
  if (stored + added > idl->data_len - SOL_IDL_HEADER) return e->wrong_account_size;
  sol_memcpy(idl->data + SOL_IDL_HEADER + stored, body + 4, added);
  uint64_t total = stored + added;
  for (int i = 0; i < 4; i++) length[i] = (uint8_t)(total >> (8 * i));
  return SUCCESS;
}

static inline __attribute__((noinline)) uint64_t sol_idl_set_authority(SolParameters *p, const uint8_t *body,
                                                                       uint64_t body_len,
                                                                       const SolAnchorIdlErrors *e) {
  SOL_IDL_TRY(sol_idl_load_account(p, 2, e));
  if (body_len != SIZE_PUBKEY) return e->invalid_instruction_data;
  sol_memcpy(p->ka[0].data + SOL_IDL_DISCRIMINATOR_LEN, body, SIZE_PUBKEY);
  return SUCCESS;
}

/* [idl (writable), authority (signer, writable), system_program]: room for `data_len` bytes of IDL, at most
   SOL_MAX_PERMITTED_DATA_INCREASE (10 KiB, what one instruction may grow an account by) more than
   the account holds, the authority paying the rent it then needs. Never shrinks. */
static inline __attribute__((noinline)) uint64_t sol_idl_resize(SolParameters *p, const uint8_t *body,
                                                                uint64_t body_len, const SolAnchorIdlErrors *e) {
  SOL_IDL_TRY(sol_idl_load_account(p, 3, e));
  if (body_len != 8) return e->invalid_instruction_data;
  SolAccountInfo *idl = &p->ka[0], *authority = &p->ka[1], *system = &p->ka[2];
  if (!authority->is_writable) return e->account_not_writable;
  if (!sol_is_system_program(system->key)) return e->wrong_program;
  uint64_t space;
  if (!sol_add_u64(SOL_IDL_HEADER, sol_get_u64(body), &space)) return e->arithmetic_overflow;
  if (space < idl->data_len || space - idl->data_len > SOL_MAX_PERMITTED_DATA_INCREASE)
    return e->invalid_instruction_data;
  uint64_t rent;
  SOL_IDL_TRY(sol_rent_exempt_minimum(space, &rent));
  if (*idl->lamports < rent) { /* System Transfer: u32 2 | lamports */
    uint8_t transfer[4 + 8] = {2};
    sol_put_u64(transfer + 4, rent - *idl->lamports);
    SolAccountMeta metas[2] = {{authority->key, true, true}, {idl->key, true, false}};
    SolInstruction instruction = {system->key, metas, 2, transfer, sizeof(transfer)};
    SolAccountInfo infos[3] = {*authority, *idl, *system};
    SOL_IDL_TRY(sol_invoke(&instruction, infos, 3));
  }
  uint64_t before = idl->data_len;
  sol_account_set_data_len(idl, space);
  sol_memset(idl->data + before, 0, space - before);
  return SUCCESS;
}

/* [idl (writable), authority (signer), destination (writable)]: the rent goes to the destination. */
static inline __attribute__((noinline)) uint64_t sol_idl_close(SolParameters *p, uint64_t body_len,
                                                               const SolAnchorIdlErrors *e) {
  SOL_IDL_TRY(sol_idl_load_account(p, 3, e));
  if (body_len != 0) return e->invalid_instruction_data;
  SolAccountInfo *idl = &p->ka[0], *destination = &p->ka[2];
  if (!destination->is_writable) return e->account_not_writable;
  if (sol_pubkey_eq(destination->key, idl->key)) return e->duplicate_account;
  uint64_t total;
  if (!sol_add_u64(*destination->lamports, *idl->lamports, &total)) return e->arithmetic_overflow;
  *destination->lamports = total;
  *idl->lamports = 0;
  sol_memset(idl->data, 0, idl->data_len);
  sol_account_set_data_len(idl, 0);
  return SUCCESS;
}

/* Create, Write, SetAuthority, Resize or Close the IDL account (CreateBuffer and SetBuffer are refused:
   not needed, not offered). `e`: the program's error codes. */
static inline __attribute__((noinline)) uint64_t sol_anchor_idl(SolParameters *p, const SolAnchorIdlErrors *e) {
  if (p->data_len < SOL_IDL_DISCRIMINATOR_LEN + 1) return e->invalid_instruction_data;
  const uint8_t *body = p->data + SOL_IDL_DISCRIMINATOR_LEN + 1;
  uint64_t body_len = p->data_len - SOL_IDL_DISCRIMINATOR_LEN - 1;
  switch (p->data[SOL_IDL_DISCRIMINATOR_LEN]) {
    case SOL_IDL_CREATE: return sol_idl_create(p, body, body_len, e);
    case SOL_IDL_WRITE: return sol_idl_write(p, body, body_len, e);
    case SOL_IDL_SET_AUTHORITY: return sol_idl_set_authority(p, body, body_len, e);
    case SOL_IDL_CLOSE: return sol_idl_close(p, body_len, e);
    case SOL_IDL_RESIZE: return sol_idl_resize(p, body, body_len, e);
    default: return e->invalid_instruction;
  }
}
#endif
