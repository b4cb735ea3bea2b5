/* Points accounts, PDA ["points", run, wallet], filled by exit_run, claim_points and settle_points. */
#include "points.h"

#include "../core/platform.h"
#include "accounts.h"
#include "pda.h"

static const char POINTS_SEED[] = "points";

uint64_t check_points_accounts(const SolParameters *p, uint64_t at, const SolPubkey *wallet) {
  const SolAccountInfo *payer = &p->ka[0], *account = &p->ka[at];
  if (!payer->is_writable || !account->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  if (!sol_is_system_program(p->ka[at + 1].key)) return ERR_WRONG_PROGRAM;
  if (account->data_len == 0) return SUCCESS; /* its address is checked when it is created */
  TRY(check_program_account(p, account, ACCOUNT_POINTS, POINTS_ACCOUNT_SIZE, true));
  const Points *points = (const Points *)(account->data + DISCRIMINATOR_LEN);
  bool ours = sol_pubkey_eq(&points->run, p->ka[1].key) && sol_pubkey_eq(&points->wallet, wallet);
  return ours ? SUCCESS : ERR_WRONG_PDA;
}

uint64_t credit_points(const SolParameters *p, uint64_t at, const SolPubkey *wallet, uint64_t amount) {
  if (amount == 0) return SUCCESS;
  SolAccountInfo *payer = &p->ka[0], *account = &p->ka[at];
  const SolPubkey *run = p->ka[1].key;
  if (account->data_len == 0) {
    SolSignerSeed seeds[4] = {{(const uint8_t *)POINTS_SEED, sizeof(POINTS_SEED) - 1},
                              {run->x, SIZE_PUBKEY},
                              {wallet->x, SIZE_PUBKEY}};
    uint8_t bump;
    NewAccount new_points = {p, payer, account, &p->ka[at + 1]};
    TRY(create_pda_at(&new_points, seeds, 3, POINTS_ACCOUNT_SIZE, &bump));
    sol_put_u64(account->data, ACCOUNT_POINTS);
    Points *fresh = (Points *)(account->data + DISCRIMINATOR_LEN);
    fresh->bump = bump;
    fresh->run = *run;
    fresh->wallet = *wallet;
  }
  Points *points = (Points *)(account->data + DISCRIMINATOR_LEN);
  points->points = sol_sat_add_u64(points->points, amount);
  PointsClaimed event = {*run, *wallet, amount, points->points};
  coord_emit(EVENT_POINTS_CLAIMED, &event, sizeof(event));
  return SUCCESS;
}
