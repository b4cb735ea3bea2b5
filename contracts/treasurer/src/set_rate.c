/* set_rate: the run's authority raises the rate per point. Never lowered, so an entitlement a member has
   seen never shrinks; raising it pays every settled point more, past ones included. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *authority, *run, *treasury;
} SetRateAccounts;

uint64_t set_rate(SolParameters *p) {
  const SetRateArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(need_accounts(p, ACC_SET_RATE_COUNT));
  SolAccountInfo *ka = p->ka;
  SetRateAccounts a = {&ka[ACC_SET_RATE_AUTHORITY], &ka[ACC_SET_RATE_RUN], &ka[ACC_SET_RATE_TREASURY]};
  TRY(check_signer(a.authority));
  Treasury *t;
  TRY(load_treasury(p, a.treasury, true, &t));
  if (!sol_pubkey_eq(a.run->key, &t->run)) return ERR_WRONG_RUN;
  const SolPubkey *authority;
  TRY(load_run(a.run, &t->coordinator, &authority));
  if (!sol_pubkey_eq(authority, a.authority->key)) return ERR_UNAUTHORIZED;
  if (args->reward_per_point < t->reward_per_point) return ERR_RATE_LOWERED;
  if (args->reward_per_point == t->reward_per_point) return ERR_NO_CHANGE;
  t->reward_per_point = args->reward_per_point;
  t->authority = *authority;
  RateRaised event = {*a.treasury->key, args->reward_per_point};
  emit(EVENT_RATE_RAISED, &event, sizeof(event));
  return SUCCESS;
}
