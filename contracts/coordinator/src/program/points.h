/* Points accounts: what a wallet earned in a run, kept outside the Run account so that its registry entry
   can go (exit, pruning) without taking the points with it. */
#pragma once
#include <sol.h>

/* Accounts [payer (writable signer), run, ..., points at `at`, system program at `at + 1`]: the checks that
   need no PDA derivation (writable, the System program, an existing account being `wallet`'s). */
uint64_t check_points_accounts(const SolParameters *p, uint64_t at, const SolPubkey *wallet);
/* Add `points` to `wallet`'s Points account, creating it at ["points", run, wallet] (the payer, p->ka[0],
   pays the rent) if it does not exist yet, and emit PointsClaimed. Nothing happens for zero points. */
uint64_t credit_points(const SolParameters *p, uint64_t at, const SolPubkey *wallet, uint64_t points);
