/* The treasurer program: escrow a run's reward token and pay members for the points the coordinator
   settled. Dispatch only; each instruction is its own file. */
#include <sol/anchor_idl.h>

#include "treasurer.h"

#define MAX_ACCOUNTS 12

/* What Anchor's IDL instructions refuse, in this program's error codes. */
static const SolAnchorIdlErrors IDL_ERRORS = SOL_ANCHOR_IDL_ERRORS;

uint64_t entrypoint(const uint8_t *input) {
  SolAccountInfo accounts[MAX_ACCOUNTS];
  SolParameters p = {.ka = accounts};
  sol_deserialize(input, &p, MAX_ACCOUNTS);
  if (p.data_len < DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION;
  switch (sol_get_u64(p.data)) {
    case IX_INIT_TREASURY: return init_treasury(&p);
    case IX_FUND: return fund(&p);
    case IX_SET_RATE: return set_rate(&p);
    case IX_REGISTER_CLAIM_KEY: return register_claim_key(&p);
    case IX_CLAIM: return claim(&p);
    case IX_MARK_RUN_CLOSED: return mark_run_closed(&p);
    case IX_CLOSE_TREASURY: return close_treasury(&p);
    case IX_CLOSE_MEMBER: return close_member(&p);
    case IX_INIT_STAKES: return init_stakes(&p);
    case IX_STAKE: return stake(&p);
    case IX_UNSTAKE: return unstake(&p);
    case IX_WITHDRAW_STAKE: return withdraw_stake(&p);
    case IX_SLASH: return slash(&p);
    case SOL_ANCHOR_IDL_IX_TAG: return sol_anchor_idl(&p, &IDL_ERRORS); /* so Anchor tooling finds the IDL */
    default: return ERR_INVALID_INSTRUCTION;
  }
}
