/* mark_run_closed: anyone records the time the treasury's run was seen closed; the claim window starts.
   A Run the coordinator still owns is open, whatever its layout (an upgraded coordinator's run is not
   closed). */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *treasury, *run;
} MarkRunClosedAccounts;

uint64_t mark_run_closed(SolParameters *p) {
  TRY(need_accounts(p, ACC_MARK_RUN_CLOSED_COUNT));
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *ka = p->ka;
  MarkRunClosedAccounts a = {&ka[ACC_MARK_RUN_CLOSED_TREASURY], &ka[ACC_MARK_RUN_CLOSED_RUN]};
  Treasury *t;
  TRY(load_treasury(p, a.treasury, true, &t));
  if (!sol_pubkey_eq(a.run->key, &t->run)) return ERR_WRONG_RUN;
  if (t->closed_at != 0) return ERR_NO_CHANGE;
  if (!account_gone(a.run, &t->coordinator)) return ERR_RUN_STILL_OPEN;
  SolClock clock;
  TRY(sol_get_clock_sysvar(&clock));
  t->closed_at = clock.unix_timestamp > 0 ? clock.unix_timestamp : 1;
  return SUCCESS;
}
