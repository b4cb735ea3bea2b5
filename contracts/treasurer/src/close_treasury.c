/* close_treasury: once the claim window after the run's close is over, the authority takes the unclaimed
   rest back; the vault and the treasury are closed and their rent goes back to whoever paid it. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *authority, *treasury, *vault, *destination, *rent_recipient, *mint, *token_program;
} CloseTreasuryAccounts;

uint64_t close_treasury(SolParameters *p) {
  TRY(need_accounts(p, ACC_CLOSE_TREASURY_COUNT));
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *ka = p->ka;
  CloseTreasuryAccounts a = {&ka[ACC_CLOSE_TREASURY_AUTHORITY], &ka[ACC_CLOSE_TREASURY_TREASURY],
                             &ka[ACC_CLOSE_TREASURY_VAULT],     &ka[ACC_CLOSE_TREASURY_DESTINATION],
                             &ka[ACC_CLOSE_TREASURY_RENT_RECIPIENT], &ka[ACC_CLOSE_TREASURY_MINT],
                             &ka[ACC_CLOSE_TREASURY_TOKEN_PROGRAM]};
  TRY(check_signer(a.authority));
  Treasury *t;
  TRY(load_treasury(p, a.treasury, true, &t));
  if (!sol_pubkey_eq(a.authority->key, &t->authority)) return ERR_UNAUTHORIZED;
  TRY(check_token_accounts(t, a.vault, a.mint, a.token_program));
  if (sol_pubkey_eq(a.destination->key, &t->vault)) return ERR_WRONG_VAULT;
  if (!sol_pubkey_eq(a.rent_recipient->key, &t->payer)) return ERR_WRONG_RENT_RECIPIENT;
  if (t->closed_at == 0) return ERR_RUN_STILL_OPEN;
  SolClock clock;
  TRY(sol_get_clock_sysvar(&clock));
  int64_t ends; /* closed_at + claim_window, both >= 0 */
  if ((uint64_t)t->closed_at + (uint64_t)t->claim_window > (uint64_t)INT64_MAX) return ERR_CLAIM_WINDOW_OPEN;
  ends = t->closed_at + t->claim_window;
  if (clock.unix_timestamp < ends) return ERR_CLAIM_WINDOW_OPEN;

  TreasurySigner signer;
  treasury_signer(t, &signer);
  uint64_t rest;
  TRY(token_amount(a.vault, &rest));
  if (rest > 0) {
    TokenTransfer sweep = {a.token_program, a.vault, a.mint, a.destination, a.treasury};
    TRY(token_transfer_checked(&sweep, rest, t->decimals, &signer.signer));
  }
  TokenTransfer close = {a.token_program, a.vault, a.mint, a.rent_recipient, a.treasury};
  TRY(token_close_account(&close, &signer.signer));
  return close_account(a.treasury, a.rent_recipient);
}
