/* close_treasury: once the claim window after the run's close is over and every stake was withdrawn or
   slashed, the authority takes the unclaimed rest back; the vaults and the treasury are closed and their rent
   goes back to the treasury's payer. While a stake is held the treasury stays: withdraw_stake needs it. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *authority, *treasury, *vault, *destination, *rent_recipient, *stake_vault, *mint, *token_program;
} CloseTreasuryAccounts;

/* Everything `vault` holds to the destination, then the vault closed, its rent to the treasury's payer. */
static uint64_t sweep_and_close(const CloseTreasuryAccounts *a, SolAccountInfo *vault, uint8_t decimals,
                                TreasurySigner *signer) {
  uint64_t rest;
  TRY(token_amount(vault, &rest));
  if (rest > 0) {
    TokenTransfer sweep = {a->token_program, vault, a->mint, a->destination, a->treasury};
    TRY(token_transfer_checked(&sweep, rest, decimals, &signer->signer));
  }
  TokenTransfer close = {a->token_program, vault, a->mint, a->rent_recipient, a->treasury};
  return token_close_account(&close, &signer->signer);
}

uint64_t close_treasury(SolParameters *p) {
  TRY(need_accounts(p, ACC_CLOSE_TREASURY_COUNT));
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *ka = p->ka;
  CloseTreasuryAccounts a = {&ka[ACC_CLOSE_TREASURY_AUTHORITY], &ka[ACC_CLOSE_TREASURY_TREASURY],
                             &ka[ACC_CLOSE_TREASURY_VAULT],     &ka[ACC_CLOSE_TREASURY_DESTINATION],
                             &ka[ACC_CLOSE_TREASURY_RENT_RECIPIENT], &ka[ACC_CLOSE_TREASURY_STAKE_VAULT],
                             &ka[ACC_CLOSE_TREASURY_MINT],           &ka[ACC_CLOSE_TREASURY_TOKEN_PROGRAM]};
  TRY(check_signer(a.authority));
  Treasury *t;
  TRY(load_treasury(p, a.treasury, true, &t));
  if (!sol_pubkey_eq(a.authority->key, &t->authority)) return ERR_UNAUTHORIZED;
  TRY(check_token_accounts(t, a.vault, a.mint, a.token_program));
  if (sol_pubkey_eq(a.destination->key, &t->vault) || sol_pubkey_eq(a.destination->key, &t->stake_vault))
    return ERR_WRONG_VAULT;
  if (!sol_pubkey_eq(a.rent_recipient->key, &t->payer)) return ERR_WRONG_RENT_RECIPIENT;
  if (t->closed_at == 0) return ERR_RUN_STILL_OPEN;
  SolClock clock;
  TRY(sol_get_clock_sysvar(&clock));
  int64_t ends; /* closed_at + claim_window, both >= 0 */
  if ((uint64_t)t->closed_at + (uint64_t)t->claim_window > (uint64_t)INT64_MAX) return ERR_CLAIM_WINDOW_OPEN;
  ends = t->closed_at + t->claim_window;
  if (clock.unix_timestamp < ends) return ERR_CLAIM_WINDOW_OPEN;
  bool stakes = t->stake_amount != 0;
  if (stakes) {
    if (t->staked != 0) return ERR_STAKES_REMAIN;
    if (!sol_pubkey_eq(a.stake_vault->key, &t->stake_vault)) return ERR_WRONG_VAULT;
  }

  TreasurySigner signer;
  treasury_signer(t, &signer);
  TRY(sweep_and_close(&a, a.vault, t->decimals, &signer));
  /* no stake is left in the stake vault: whatever it holds was sent to it, and goes with the rest */
  if (stakes) {
    TRY(sweep_and_close(&a, a.stake_vault, t->decimals, &signer));
  }
  return close_account(a.treasury, a.rent_recipient);
}
