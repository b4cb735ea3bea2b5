/* stake: a wallet deposits the run's stake; the treasurer, the run's join authority, authorizes it to join. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *wallet, *source, *treasury, *stake, *stake_vault, *mint, *token_program, *run, *authorization,
      *joiner, *coordinator_program, *system_program;
} StakeAccounts;

static const char STAKE_SEED[] = "stake";

uint64_t stake(SolParameters *p) {
  TRY(need_accounts(p, ACC_STAKE_COUNT));
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *ka = p->ka;
  StakeAccounts a = {&ka[ACC_STAKE_WALLET],        &ka[ACC_STAKE_SOURCE],       &ka[ACC_STAKE_TREASURY],
                     &ka[ACC_STAKE_STAKE],         &ka[ACC_STAKE_STAKE_VAULT],  &ka[ACC_STAKE_MINT],
                     &ka[ACC_STAKE_TOKEN_PROGRAM], &ka[ACC_STAKE_RUN],          &ka[ACC_STAKE_AUTHORIZATION],
                     &ka[ACC_STAKE_JOINER],        &ka[ACC_STAKE_COORDINATOR_PROGRAM], &ka[ACC_STAKE_SYSTEM_PROGRAM]};
  TRY(check_signer(a.wallet));
  Treasury *t;
  TRY(load_treasury(p, a.treasury, true, &t));
  Joiner j = {p, a.treasury, t, a.run, a.authorization, a.joiner, a.coordinator_program, a.system_program};
  TRY(check_joiner(&j));
  TRY(check_token_accounts(t, NULL, a.mint, a.token_program));
  if (!sol_pubkey_eq(a.stake_vault->key, &t->stake_vault)) return ERR_WRONG_VAULT;
  if (sol_pubkey_eq(a.source->key, &t->stake_vault)) return ERR_WRONG_VAULT;
  uint64_t staked;
  if (!sol_add_u64(t->staked, t->stake_amount, &staked)) return ERR_ARITHMETIC_OVERFLOW;

  SolSignerSeed seeds[4] = {{(const uint8_t *)STAKE_SEED, sizeof(STAKE_SEED) - 1},
                            {a.treasury->key->x, SIZE_PUBKEY},
                            {a.wallet->key->x, SIZE_PUBKEY}};
  uint8_t bump;
  NewPda account = {p, a.wallet, a.stake, a.system_program, p->program_id};
  TRY(create_pda(&account, seeds, 3, STAKE_ACCOUNT_SIZE, &bump));
  TokenTransfer deposit = {a.token_program, a.source, a.mint, a.stake_vault, a.wallet};
  TRY(token_transfer_checked(&deposit, t->stake_amount, t->decimals, NULL));
  TRY(joiner_authorize(&j, a.wallet, a.wallet->key));

  sol_put_u64(a.stake->data, ACCOUNT_STAKE);
  Stake *s = (Stake *)(a.stake->data + DISCRIMINATOR_LEN);
  s->bump = bump;
  s->state = STAKE_STATE_STAKED;
  s->treasury = *a.treasury->key;
  s->wallet = *a.wallet->key;
  s->amount = t->stake_amount; /* what the stake vault holds for it, whatever the rule becomes later */
  t->staked = staked;
  return SUCCESS;
}
