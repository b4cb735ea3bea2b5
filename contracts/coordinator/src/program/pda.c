/* Creating program-derived accounts through the System program. */
#include "pda.h"

#include "accounts.h"

/* SBF calls take at most five arguments, hence the struct. */
typedef struct {
  const NewAccount *at;
  const SolSignerSeeds *seeds; /* the PDA's seeds, bump included */
} NewPda;

/* One System program instruction through CPI: the payer funds the PDA (Transfer), or the PDA signs for
   itself (Allocate, Assign). */
static uint64_t system_call(const NewPda *c, bool from_payer, uint8_t *data, uint64_t data_len) {
  SolAccountMeta metas[2];
  SolAccountInfo infos[3];
  uint64_t n = 0;
  if (from_payer) {
    metas[n] = (SolAccountMeta){c->at->payer->key, true, true};
    infos[n++] = *c->at->payer;
  }
  metas[n] = (SolAccountMeta){c->at->account->key, true, !from_payer};
  infos[n++] = *c->at->account;
  infos[n] = *c->at->system_program;
  SolInstruction instruction = {c->at->system_program->key, metas, n, data, data_len};
  uint64_t status = sol_invoke_signed_c(&instruction, infos, (int)n + 1, from_payer ? NULL : c->seeds, from_payer ? 0 : 1);
  if (status == SUCCESS) c->at->account->data_len = infos[n - 1].data_len; /* Allocate changes it */
  return status;
}

/* Create the PDA with `space` bytes, owned by this program. CreateAccount refuses an address that
   already holds lamports, and anyone may send lamports to any address, so a few lamports would block a
   run id or a grantee's JoinAuthorization forever. A funded but still empty, system-owned address is
   therefore taken over with Transfer (the rent shortfall), Allocate and Assign. */
static uint64_t create_pda(const NewPda *c, uint64_t space) {
  SolAccountInfo *account = c->at->account;
  if (*account->lamports == 0) {
    SolCreateAccount create = {c->at->payer, account, c->at->system_program, space, c->at->p->program_id, c->seeds};
    return sol_create_account(&create);
  }
  if (!sol_is_system_program(account->owner) || account->data_len != 0) return ERR_ALREADY_INITIALIZED;
  uint64_t rent;
  TRY(sol_rent_exempt_minimum(space, &rent));
  if (*account->lamports < rent) {
    uint8_t transfer[4 + 8] = {2}; /* u32 tag 2 = Transfer, u64 lamports */
    sol_put_u64(transfer + 4, rent - *account->lamports);
    TRY(system_call(c, true, transfer, sizeof(transfer)));
  }
  uint8_t allocate[4 + 8] = {8}; /* u32 tag 8 = Allocate, u64 space */
  sol_put_u64(allocate + 4, space);
  TRY(system_call(c, false, allocate, sizeof(allocate)));
  uint8_t assign[4 + SIZE_PUBKEY] = {1}; /* u32 tag 1 = Assign, owner */
  sol_memcpy(assign + 4, c->at->p->program_id->x, SIZE_PUBKEY);
  return system_call(c, false, assign, sizeof(assign));
}

uint64_t create_pda_at(const NewAccount *c, SolSignerSeed *seeds, int n, uint64_t space, uint8_t *bump) {
  SolPubkey expected;
  TRY(sol_try_find_program_address(seeds, n, c->p->program_id, &expected, bump));
  if (!sol_pubkey_eq(&expected, c->account->key)) return ERR_WRONG_PDA;
  if (c->account->data_len != 0) return ERR_ALREADY_INITIALIZED;
  seeds[n] = (SolSignerSeed){bump, 1};
  SolSignerSeeds signer = {seeds, (uint64_t)n + 1};
  NewPda pda = {c, &signer};
  return create_pda(&pda, space);
}
