/* fund: anyone deposits tokens into the run's vault. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *funder, *source, *treasury, *vault, *mint, *token_program;
} FundAccounts;

uint64_t fund(SolParameters *p) {
  const FundArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(need_accounts(p, ACC_FUND_COUNT));
  SolAccountInfo *ka = p->ka;
  FundAccounts a = {&ka[ACC_FUND_FUNDER], &ka[ACC_FUND_SOURCE], &ka[ACC_FUND_TREASURY],
                    &ka[ACC_FUND_VAULT], &ka[ACC_FUND_MINT], &ka[ACC_FUND_TOKEN_PROGRAM]};
  TRY(check_signer(a.funder));
  if (args->amount == 0) return ERR_ZERO_AMOUNT;
  Treasury *t;
  TRY(load_treasury(p, a.treasury, true, &t));
  TRY(check_token_accounts(t, a.vault, a.mint, a.token_program));
  if (sol_pubkey_eq(a.source->key, &t->vault)) return ERR_WRONG_VAULT; /* would count as funded */
  uint64_t funded;
  if (!sol_add_u64(t->funded, args->amount, &funded)) return ERR_ARITHMETIC_OVERFLOW;
  /* the token program checks the source's mint, owner (or delegate) and balance */
  TokenTransfer transfer = {a.token_program, a.source, a.mint, a.vault, a.funder};
  TRY(token_transfer_checked(&transfer, args->amount, t->decimals, NULL));
  t->funded = funded;
  Funded event = {*a.treasury->key, *a.funder->key, args->amount, funded};
  emit(EVENT_FUNDED, &event, sizeof(event));
  return SUCCESS;
}
