/* unstake: a wallet that is no longer in the run's registry (it exited, or the run closed) gives up its
   authorization to join (its JoinAuthorization's rent comes back to it) and starts the unstake delay, which
   covers the checks that may still convict it for the epoch it was in. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *wallet, *treasury, *stake, *run, *authorization, *joiner, *coordinator_program, *system_program;
} UnstakeAccounts;

uint64_t unstake(SolParameters *p) {
  TRY(need_accounts(p, ACC_UNSTAKE_COUNT));
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *ka = p->ka;
  UnstakeAccounts a = {&ka[ACC_UNSTAKE_WALLET], &ka[ACC_UNSTAKE_TREASURY], &ka[ACC_UNSTAKE_STAKE],
                       &ka[ACC_UNSTAKE_RUN],    &ka[ACC_UNSTAKE_AUTHORIZATION], &ka[ACC_UNSTAKE_JOINER],
                       &ka[ACC_UNSTAKE_COORDINATOR_PROGRAM], &ka[ACC_UNSTAKE_SYSTEM_PROGRAM]};
  TRY(check_signer(a.wallet));
  TRY(check_writable(a.wallet));
  Treasury *t;
  Stake *s;
  TRY(load_treasury(p, a.treasury, false, &t));
  TRY(load_stake(p, a.stake, a.treasury, &s));
  if (!sol_pubkey_eq(&s->wallet, a.wallet->key)) return ERR_WRONG_PDA;
  if (s->state != STAKE_STATE_STAKED) return ERR_WRONG_STAKE_STATE;
  Joiner j = {p, a.treasury, t, a.run, a.authorization, a.joiner, a.coordinator_program, a.system_program};
  TRY(check_joiner(&j));
  if (!account_gone(a.run, &t->coordinator)) {
    const SolPubkey *authority;
    TRY(load_run(a.run, &t->coordinator, &authority));
    if (run_registers(a.run, a.wallet->key)) return ERR_STILL_IN_RUN;
  }
  if (a.authorization->data_len != 0) { /* the wallet's own grant: the coordinator checks run and join authority */
    if (a.authorization->data_len != TREAS_COORD_JOIN_AUTHORIZATION_SIZE ||
        !sol_pubkey_eq((const SolPubkey *)(a.authorization->data + TREAS_COORD_JOIN_AUTHORIZATION_GRANTEE_OFFSET), a.wallet->key))
      return ERR_WRONG_PDA;
    TRY(joiner_revoke(&j, a.wallet));
  }
  SolClock clock;
  TRY(sol_get_clock_sysvar(&clock));
  int64_t at;
  if (clock.unix_timestamp > INT64_MAX - t->unstake_delay) return ERR_ARITHMETIC_OVERFLOW;
  at = clock.unix_timestamp + t->unstake_delay;
  s->state = STAKE_STATE_UNSTAKING;
  s->unstake_at = at;
  return SUCCESS;
}
