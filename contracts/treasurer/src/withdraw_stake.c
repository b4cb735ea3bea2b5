/* withdraw_stake: once the unstake delay is over, the stake goes to any token account and the Stake account
   is closed (rent back to the wallet). A slashed stake holds nothing: its account is just closed. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *wallet, *treasury, *stake, *stake_vault, *destination, *mint, *token_program;
} WithdrawStakeAccounts;

uint64_t withdraw_stake(SolParameters *p) {
  TRY(need_accounts(p, ACC_WITHDRAW_STAKE_COUNT));
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *ka = p->ka;
  WithdrawStakeAccounts a = {&ka[ACC_WITHDRAW_STAKE_WALLET],      &ka[ACC_WITHDRAW_STAKE_TREASURY],
                             &ka[ACC_WITHDRAW_STAKE_STAKE],       &ka[ACC_WITHDRAW_STAKE_STAKE_VAULT],
                             &ka[ACC_WITHDRAW_STAKE_DESTINATION], &ka[ACC_WITHDRAW_STAKE_MINT],
                             &ka[ACC_WITHDRAW_STAKE_TOKEN_PROGRAM]};
  TRY(check_signer(a.wallet));
  Treasury *t;
  Stake *s;
  TRY(load_treasury(p, a.treasury, true, &t));
  TRY(load_stake(p, a.stake, a.treasury, &s));
  if (!sol_pubkey_eq(&s->wallet, a.wallet->key)) return ERR_WRONG_PDA;
  if (s->state == STAKE_STATE_UNSTAKING) {
    TRY(check_token_accounts(t, NULL, a.mint, a.token_program));
    if (!sol_pubkey_eq(a.stake_vault->key, &t->stake_vault) || sol_pubkey_eq(a.destination->key, &t->stake_vault))
      return ERR_WRONG_VAULT;
    SolClock clock;
    TRY(sol_get_clock_sysvar(&clock));
    if (clock.unix_timestamp < s->unstake_at) return ERR_STAKE_LOCKED;
    TreasurySigner signer;
    treasury_signer(t, &signer);
    TokenTransfer back = {a.token_program, a.stake_vault, a.mint, a.destination, a.treasury};
    TRY(token_transfer_checked(&back, s->amount, t->decimals, &signer.signer));
    t->staked -= s->amount; /* every live stake's amount was added to it */
  } else if (s->state != STAKE_STATE_SLASHED) {
    return ERR_WRONG_STAKE_STATE; /* Staked: unstake first */
  }
  return close_account(a.stake, a.wallet);
}
