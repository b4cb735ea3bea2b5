/* Creating program-derived accounts through the System program (sol/pda.h), with this program's errors. */
#include "pda.h"

#include "accounts.h"

uint64_t create_pda_at(const NewAccount *c, SolSignerSeed *seeds, int n, uint64_t space, uint8_t *bump) {
  SolPubkey expected;
  TRY(sol_try_find_program_address(seeds, n, c->p->program_id, &expected, bump));
  if (!sol_pubkey_eq(&expected, c->account->key)) return ERR_WRONG_PDA;
  if (c->account->data_len != 0 || !sol_is_system_program(c->account->owner)) return ERR_ALREADY_INITIALIZED;
  seeds[n] = (SolSignerSeed){bump, 1};
  SolSignerSeeds signer = {seeds, (uint64_t)n + 1};
  SolNewPda pda = {c->payer, c->account, c->system_program, c->p->program_id};
  return sol_create_pda(&pda, &signer, space);
}
