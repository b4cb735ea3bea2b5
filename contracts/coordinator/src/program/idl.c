/* Anchor's IDL account protocol. Instruction data: the 8-byte tag, a u8 variant, then its Borsh fields:
   0 Create { data_len: u64 }, 2 Write { data: Vec<u8> }, 4 SetAuthority { new_authority: Pubkey }, 5 Close,
   6 Resize { data_len: u64 } (an IDL past what one Create may allocate grows 10 KiB a call, as Anchor's).
   The account lives at create_with_seed(base, "anchor:idl", program) with base = the program's PDA of no
   seeds, and holds: discriminator (sha256("account:IdlAccount")[..8]), authority, u32 length, then the
   zlib-compressed IDL JSON. Stricter than Anchor: only the program's upgrade authority may create it
   (Anchor lets whoever comes first own it), so Create also takes the program data account. Anyone may
   send lamports to any address, so a funded but still empty, system-owned IDL address is taken over
   (the rent shortfall, then AllocateWithSeed) instead of blocking publication for good. */
#include "idl.h"

#include "accounts.h"

#define IDL_ACCOUNT_DISCRIMINATOR 0xa421c56702a6248cULL
#define IDL_HEADER (DISCRIMINATOR_LEN + SIZE_PUBKEY + 4)
#define IDL_MAX_SPACE 10000 /* what one CreateAccountWithSeed may allocate (Anchor's bound too) */
#define IDL_SEED "anchor:idl"
#define IDL_SEED_LEN 10

enum { IDL_CREATE = 0, IDL_WRITE = 2, IDL_SET_AUTHORITY = 4, IDL_CLOSE = 5, IDL_RESIZE = 6 };

static const SolPubkey LOADER_V3 = {{2,   168, 246, 145, 78,  136, 161, 176, 226, 16, 21,
                                     62,  247, 99,  174, 43,  0,   194, 185, 61,  22, 193,
                                     36,  210, 192, 83,  122, 16,  4,   128, 0,   0}};

/* The program's upgrade authority, from its program account and program data account (loader v3:
   program = u32 2 | programdata key; programdata = u32 3 | u64 slot | Option<Pubkey> authority). */
static uint64_t upgrade_authority(const SolParameters *p, const SolAccountInfo *program, const SolAccountInfo *data,
                                  const SolPubkey **authority) {
  if (!sol_pubkey_eq(program->key, p->program_id) || !program->executable) return ERR_WRONG_PROGRAM;
  if (!sol_pubkey_eq(program->owner, &LOADER_V3) || !sol_pubkey_eq(data->owner, &LOADER_V3))
    return ERR_WRONG_ACCOUNT_OWNER;
  if (program->data_len < 4 + SIZE_PUBKEY || sol_get_u32(program->data) != 2) return ERR_WRONG_PROGRAM;
  if (sol_memcmp(program->data + 4, data->key->x, SIZE_PUBKEY) != 0) return ERR_WRONG_PDA;
  if (data->data_len < 13 + SIZE_PUBKEY || sol_get_u32(data->data) != 3) return ERR_WRONG_PROGRAM;
  if (data->data[12] != 1) return ERR_UNAUTHORIZED; /* immutable program: nobody may publish */
  *authority = (const SolPubkey *)(data->data + 13);
  return SUCCESS;
}

/* [from (signer, writable), idl (writable), base, system_program, program, program_data] */
__attribute__((noinline)) static uint64_t idl_create(SolParameters *p, const uint8_t *body, uint64_t body_len) {
  if (body_len != 8) return ERR_INVALID_INSTRUCTION_DATA;
  if (p->ka_num < 6) return ERR_MISSING_ACCOUNTS;
  SolAccountInfo *from = &p->ka[0], *idl = &p->ka[1], *base = &p->ka[2], *system = &p->ka[3];
  TRY(check_signer(from));
  if (!from->is_writable || !idl->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  const SolPubkey *authority;
  TRY(upgrade_authority(p, &p->ka[4], &p->ka[5], &authority));
  if (!sol_pubkey_eq(authority, from->key)) return ERR_UNAUTHORIZED;
  if (!sol_is_system_program(system->key)) return ERR_WRONG_PROGRAM;

  SolPubkey expected;
  uint8_t bump;
  const SolSignerSeed no_seeds[1] = {{(const uint8_t *)IDL_SEED, 0}};
  TRY(sol_try_find_program_address(no_seeds, 0, p->program_id, &expected, &bump));
  if (!sol_pubkey_eq(&expected, base->key)) return ERR_WRONG_PDA;
  const SolBytes parts[3] = {{base->key->x, SIZE_PUBKEY}, {(const uint8_t *)IDL_SEED, IDL_SEED_LEN},
                             {p->program_id->x, SIZE_PUBKEY}};
  TRY(sol_sha256(parts, 3, expected.x));
  if (!sol_pubkey_eq(&expected, idl->key)) return ERR_WRONG_PDA;
  if (idl->data_len != 0 || (*idl->lamports != 0 && !sol_is_system_program(idl->owner))) return ERR_ALREADY_INITIALIZED;

  uint64_t data_len = sol_get_u64(body);
  if (data_len > IDL_MAX_SPACE - IDL_HEADER) return ERR_INVALID_INSTRUCTION_DATA;
  uint64_t space = IDL_HEADER + data_len, lamports;
  TRY(sol_rent_exempt_minimum(space, &lamports));
  const SolSignerSeed seed = {&bump, 1};
  const SolSignerSeeds signer = {&seed, 1};
  SolAccountInfo infos[4] = {*from, *idl, *base, *system};
  if (*idl->lamports == 0) {
    /* System CreateAccountWithSeed: u32 3 | base | u64 seed length | seed | lamports | space | owner */
    uint8_t data[4 + SIZE_PUBKEY + 8 + IDL_SEED_LEN + 8 + 8 + SIZE_PUBKEY] = {3};
    uint8_t *at = data + 4;
    sol_memcpy(at, base->key->x, SIZE_PUBKEY);
    sol_put_u64(at += SIZE_PUBKEY, IDL_SEED_LEN);
    sol_memcpy(at += 8, IDL_SEED, IDL_SEED_LEN);
    sol_put_u64(at += IDL_SEED_LEN, lamports);
    sol_put_u64(at += 8, space);
    sol_memcpy(at + 8, p->program_id->x, SIZE_PUBKEY);
    SolAccountMeta metas[3] = {{from->key, true, true}, {idl->key, true, false}, {base->key, false, true}};
    SolInstruction instruction = {system->key, metas, 3, data, sizeof(data)};
    TRY(sol_invoke_signed_c(&instruction, infos, 4, &signer, 1));
  } else {
    if (*idl->lamports < lamports) { /* System Transfer: u32 2 | lamports */
      uint8_t transfer[4 + 8] = {2};
      sol_put_u64(transfer + 4, lamports - *idl->lamports);
      SolAccountMeta metas[2] = {{from->key, true, true}, {idl->key, true, false}};
      SolInstruction instruction = {system->key, metas, 2, transfer, sizeof(transfer)};
      TRY(sol_invoke_signed_c(&instruction, infos, 4, NULL, 0));
    }
    /* System AllocateWithSeed: u32 9 | base | u64 seed length | seed | space | owner (allocates, assigns) */
    uint8_t data[4 + SIZE_PUBKEY + 8 + IDL_SEED_LEN + 8 + SIZE_PUBKEY] = {9};
    uint8_t *at = data + 4;
    sol_memcpy(at, base->key->x, SIZE_PUBKEY);
    sol_put_u64(at += SIZE_PUBKEY, IDL_SEED_LEN);
    sol_memcpy(at += 8, IDL_SEED, IDL_SEED_LEN);
    sol_put_u64(at += IDL_SEED_LEN, space);
    sol_memcpy(at + 8, p->program_id->x, SIZE_PUBKEY);
    SolAccountMeta metas[2] = {{idl->key, true, false}, {base->key, false, true}};
    SolInstruction instruction = {system->key, metas, 2, data, sizeof(data)};
    TRY(sol_invoke_signed_c(&instruction, infos, 4, &signer, 1));
  }
  idl->data_len = infos[1].data_len;
  if (idl->data_len != space) return ERR_WRONG_ACCOUNT_SIZE;
  sol_put_u64(idl->data, IDL_ACCOUNT_DISCRIMINATOR);
  sol_memcpy(idl->data + DISCRIMINATOR_LEN, from->key->x, SIZE_PUBKEY);
  sol_memset(idl->data + DISCRIMINATOR_LEN + SIZE_PUBKEY, 0, 4);
  return SUCCESS;
}

/* [idl (writable), authority (signer)]: the IDL account, signed for by its authority. */
static uint64_t load_idl_account(const SolParameters *p, uint64_t accounts) {
  if (p->ka_num < accounts) return ERR_MISSING_ACCOUNTS;
  const SolAccountInfo *idl = &p->ka[0], *authority = &p->ka[1];
  if (!sol_pubkey_eq(idl->owner, p->program_id)) return ERR_WRONG_ACCOUNT_OWNER;
  if (idl->data_len < IDL_HEADER) return ERR_WRONG_ACCOUNT_SIZE;
  if (sol_get_u64(idl->data) != IDL_ACCOUNT_DISCRIMINATOR) return ERR_WRONG_DISCRIMINATOR;
  if (!idl->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  TRY(check_signer(authority));
  return sol_memcmp(idl->data + DISCRIMINATOR_LEN, authority->key->x, SIZE_PUBKEY) == 0 ? SUCCESS : ERR_UNAUTHORIZED;
}

/* Append bytes to the stored IDL: Borsh Vec<u8> (u32 length + bytes). */
__attribute__((noinline)) static uint64_t idl_write(SolParameters *p, const uint8_t *body, uint64_t body_len) {
  TRY(load_idl_account(p, 2));
  if (body_len < 4 || body_len - 4 != sol_get_u32(body)) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *idl = &p->ka[0];
  uint8_t *length = idl->data + DISCRIMINATOR_LEN + SIZE_PUBKEY;
  uint64_t stored = sol_get_u32(length), added = body_len - 4;
  if (stored + added > idl->data_len - IDL_HEADER) return ERR_WRONG_ACCOUNT_SIZE;
  sol_memcpy(idl->data + IDL_HEADER + stored, body + 4, added);
  uint64_t total = stored + added;
  for (int i = 0; i < 4; i++) length[i] = (uint8_t)(total >> (8 * i));
  return SUCCESS;
}

__attribute__((noinline)) static uint64_t idl_set_authority(SolParameters *p, const uint8_t *body, uint64_t body_len) {
  TRY(load_idl_account(p, 2));
  if (body_len != SIZE_PUBKEY) return ERR_INVALID_INSTRUCTION_DATA;
  sol_memcpy(p->ka[0].data + DISCRIMINATOR_LEN, body, SIZE_PUBKEY);
  return SUCCESS;
}

/* [idl (writable), authority (signer, writable), system_program]: room for `data_len` bytes of IDL, at most
   SOL_MAX_PERMITTED_DATA_INCREASE (10 KiB, what one instruction may grow an account by) more than
   the account holds, the authority paying the rent it then needs. Never shrinks. */
__attribute__((noinline)) static uint64_t idl_resize(SolParameters *p, const uint8_t *body, uint64_t body_len) {
  TRY(load_idl_account(p, 3));
  if (body_len != 8) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *idl = &p->ka[0], *authority = &p->ka[1], *system = &p->ka[2];
  if (!authority->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  if (!sol_is_system_program(system->key)) return ERR_WRONG_PROGRAM;
  uint64_t space;
  if (!sol_add_u64(IDL_HEADER, sol_get_u64(body), &space)) return ERR_ARITHMETIC_OVERFLOW;
  if (space < idl->data_len || space - idl->data_len > SOL_MAX_PERMITTED_DATA_INCREASE) return ERR_INVALID_INSTRUCTION_DATA;
  uint64_t rent;
  TRY(sol_rent_exempt_minimum(space, &rent));
  if (*idl->lamports < rent) { /* System Transfer: u32 2 | lamports */
    uint8_t transfer[4 + 8] = {2};
    sol_put_u64(transfer + 4, rent - *idl->lamports);
    SolAccountMeta metas[2] = {{authority->key, true, true}, {idl->key, true, false}};
    SolInstruction instruction = {system->key, metas, 2, transfer, sizeof(transfer)};
    SolAccountInfo infos[3] = {*authority, *idl, *system};
    TRY(sol_invoke(&instruction, infos, 3));
  }
  uint64_t before = idl->data_len;
  sol_account_set_data_len(idl, space);
  sol_memset(idl->data + before, 0, space - before);
  return SUCCESS;
}

/* [idl (writable), authority (signer), destination (writable)]: the rent goes to the destination. */
__attribute__((noinline)) static uint64_t idl_close(SolParameters *p, uint64_t body_len) {
  TRY(load_idl_account(p, 3));
  if (body_len != 0) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *idl = &p->ka[0], *destination = &p->ka[2];
  if (!destination->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  if (sol_pubkey_eq(destination->key, idl->key)) return ERR_DUPLICATE_ACCOUNT;
  uint64_t total;
  if (!sol_add_u64(*destination->lamports, *idl->lamports, &total)) return ERR_ARITHMETIC_OVERFLOW;
  *destination->lamports = total;
  *idl->lamports = 0;
  sol_memset(idl->data, 0, idl->data_len);
  sol_account_set_data_len(idl, 0);
  return SUCCESS;
}

uint64_t anchor_idl(SolParameters *p) {
  if (p->data_len < DISCRIMINATOR_LEN + 1) return ERR_INVALID_INSTRUCTION_DATA;
  const uint8_t *body = p->data + DISCRIMINATOR_LEN + 1;
  uint64_t body_len = p->data_len - DISCRIMINATOR_LEN - 1;
  switch (p->data[DISCRIMINATOR_LEN]) {
    case IDL_CREATE: return idl_create(p, body, body_len);
    case IDL_WRITE: return idl_write(p, body, body_len);
    case IDL_SET_AUTHORITY: return idl_set_authority(p, body, body_len);
    case IDL_CLOSE: return idl_close(p, body_len);
    case IDL_RESIZE: return idl_resize(p, body, body_len);
    default: return ERR_INVALID_INSTRUCTION; /* CreateBuffer, SetBuffer: not needed, not offered */
  }
}
