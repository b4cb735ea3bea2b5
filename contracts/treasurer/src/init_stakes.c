/* init_stakes: the run's authority requires a stake to join, once. The run must name the treasury's joiner
   PDA as its join authority with the Authorized join policy, so the only wallets that can join are the ones
   the treasurer authorized: the staked ones. The coordinator never depends on the treasurer. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *payer, *authority, *run, *treasury, *stake_vault, *mint, *token_program, *system_program;
} InitStakesAccounts;

static const char STAKES_SEED[] = "stakes";

/* The stake vault: a token account of the mint at ["stakes", treasury] owned by the treasury (its size asked
   of the token program, like the reward vault's). */
static uint64_t create_stake_vault(const SolParameters *p, const InitStakesAccounts *a) {
  SolSignerSeed seeds[3] = {{(const uint8_t *)STAKES_SEED, sizeof(STAKES_SEED) - 1}, {a->treasury->key->x, SIZE_PUBKEY}};
  uint8_t bump;
  NewTokenAccount vault = {p, a->payer, a->stake_vault, a->mint, a->token_program, a->system_program, a->treasury->key};
  return create_token_account(&vault, seeds, 2, &bump);
}

uint64_t init_stakes(SolParameters *p) {
  const InitStakesArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(need_accounts(p, ACC_INIT_STAKES_COUNT));
  SolAccountInfo *ka = p->ka;
  InitStakesAccounts a = {&ka[ACC_INIT_STAKES_PAYER],       &ka[ACC_INIT_STAKES_AUTHORITY],
                          &ka[ACC_INIT_STAKES_RUN],         &ka[ACC_INIT_STAKES_TREASURY],
                          &ka[ACC_INIT_STAKES_STAKE_VAULT], &ka[ACC_INIT_STAKES_MINT],
                          &ka[ACC_INIT_STAKES_TOKEN_PROGRAM], &ka[ACC_INIT_STAKES_SYSTEM_PROGRAM]};
  TRY(check_signer(a.payer));
  TRY(check_signer(a.authority));
  Treasury *t;
  TRY(load_treasury(p, a.treasury, true, &t));
  if (t->stake_amount != 0) return ERR_ALREADY_INITIALIZED;
  TRY(check_token_accounts(t, NULL, a.mint, a.token_program));
  if (!sol_pubkey_eq(a.run->key, &t->run)) return ERR_WRONG_RUN;
  const SolPubkey *authority;
  TRY(load_run(a.run, &t->coordinator, &authority));
  if (!sol_pubkey_eq(authority, a.authority->key)) return ERR_UNAUTHORIZED;
  if (args->stake_amount == 0 || args->unstake_delay < 0) return ERR_INVALID_RATE;

  SolPubkey joiner;
  uint8_t joiner_bump;
  TRY(find_joiner(p, a.treasury->key, &joiner, &joiner_bump));
  const uint8_t *run = a.run->data;
  if (!sol_pubkey_eq((const SolPubkey *)(run + TREAS_COORD_RUN_JOIN_AUTHORITY_OFFSET), &joiner) ||
      run[TREAS_COORD_RUN_JOIN_POLICY_OFFSET] != TREAS_COORD_JOIN_POLICY_AUTHORIZED)
    return ERR_NOT_JOIN_AUTHORITY;
  /* a member that left may still be convicted until the epoch it was in ends: the delay covers an epoch, its
     cooldown and the round that may run over the epoch's time (seconds, from the run's config now) */
  uint64_t floor, round = (uint64_t)sol_get_u32(run + TREAS_COORD_RUN_ROUND_TRAIN_TIME_OFFSET) +
                          sol_get_u32(run + TREAS_COORD_RUN_ROUND_WITNESS_TIME_OFFSET);
  if (!sol_add_u64(sol_get_u64(run + TREAS_COORD_RUN_EPOCH_TIME_OFFSET),
                   sol_get_u64(run + TREAS_COORD_RUN_COOLDOWN_TIME_OFFSET), &floor) ||
      !sol_add_u64(floor, round, &floor) || (uint64_t)args->unstake_delay < floor)
    return ERR_DELAY_TOO_SHORT;

  TRY(create_stake_vault(p, &a));
  t->stake_amount = args->stake_amount;
  t->unstake_delay = args->unstake_delay;
  t->stake_vault = *a.stake_vault->key;
  t->joiner_bump = joiner_bump;
  return SUCCESS;
}
