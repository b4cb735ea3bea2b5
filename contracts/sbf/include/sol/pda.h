/* Creating program-derived accounts through the System program. On-chain only. */
#pragma once
#include "cpi.h"

#ifdef __bpf__
/* A new program-derived account: who pays its rent, the account, the System program's account, its owner. */
typedef struct {
  const SolAccountInfo *payer;          /* writable signer */
  SolAccountInfo *account;              /* the PDA (empty, System-owned); its data_len is updated */
  const SolAccountInfo *system_program;
  const SolPubkey *owner;               /* the program the account will belong to */
} SolNewPda;

/* One System program instruction through CPI: the payer funds the PDA (Transfer), or the PDA signs for
   itself (Allocate, Assign) through `seeds`. */
static inline uint64_t sol_pda_system_call(const SolNewPda *c, const SolSignerSeeds *seeds, bool from_payer,
                                           uint8_t *data, uint64_t data_len) {
  SolAccountMeta metas[2];
  SolAccountInfo infos[3];
  uint64_t n = 0;
  if (from_payer) {
    metas[n] = (SolAccountMeta){c->payer->key, true, true};
    infos[n++] = *c->payer;
  }
  metas[n] = (SolAccountMeta){c->account->key, true, !from_payer};
  infos[n++] = *c->account;
  infos[n] = *c->system_program;
  SolInstruction instruction = {c->system_program->key, metas, n, data, data_len};
  uint64_t status = sol_invoke_signed_c(&instruction, infos, (int)n + 1, from_payer ? NULL : seeds, from_payer ? 0 : 1);
  if (status == SUCCESS) c->account->data_len = infos[n - 1].data_len; /* Allocate changes it */
  return status;
}

/* Create the PDA whose signer seeds (bump included) are `seeds` with `space` bytes. CreateAccount refuses an
   address that already holds lamports, and anyone may send lamports to any address, so a few lamports would
   block the address forever: a funded but still empty, System-owned address is taken over with Transfer
   (the rent shortfall), Allocate and Assign instead. The caller checks the address and that it is empty. */
static inline uint64_t sol_create_pda(const SolNewPda *c, const SolSignerSeeds *seeds, uint64_t space) {
  if (*c->account->lamports == 0) {
    SolCreateAccount create = {c->payer, c->account, c->system_program, space, c->owner, seeds};
    return sol_create_account(&create);
  }
  uint64_t rent;
  uint64_t status = sol_rent_exempt_minimum(space, &rent);
  if (status != SUCCESS) return status;
  if (*c->account->lamports < rent) {
    uint8_t transfer[4 + 8] = {2}; /* u32 tag 2 = Transfer, u64 lamports */
    sol_put_u64(transfer + 4, rent - *c->account->lamports);
    status = sol_pda_system_call(c, seeds, true, transfer, sizeof(transfer));
    if (status != SUCCESS) return status;
  }
  uint8_t allocate[4 + 8] = {8}; /* u32 tag 8 = Allocate, u64 space */
  sol_put_u64(allocate + 4, space);
  status = sol_pda_system_call(c, seeds, false, allocate, sizeof(allocate));
  if (status != SUCCESS) return status;
  uint8_t assign[4 + SIZE_PUBKEY] = {1}; /* u32 tag 1 = Assign, owner */
  sol_memcpy(assign + 4, c->owner->x, SIZE_PUBKEY);
  return sol_pda_system_call(c, seeds, false, assign, sizeof(assign));
}
#endif
