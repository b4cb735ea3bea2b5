/* claim: pay a member up to points × reward_per_point − claimed, the points read from the coordinator's
   Points account of (run, wallet) — owner, size, type, run, wallet and address checked — never from the
   claimant. Points there are settled: a conviction forfeits only points still in the Run's registry. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *claim_key, *treasury, *member, *points, *vault, *destination, *mint, *token_program;
} ClaimAccounts;

static const char POINTS_SEED[] = "points";

/* The member's settled points: a genuine coordinator Points account of the treasury's run and the wallet. */
static uint64_t settled_points(const ClaimAccounts *a, const Treasury *t, const Member *m, uint64_t *points) {
  const SolAccountInfo *account = a->points;
  if (!sol_pubkey_eq(account->owner, &t->coordinator)) return ERR_WRONG_COORDINATOR;
  if (account->data_len != TREAS_COORD_POINTS_SIZE || sol_get_u64(account->data) != TREAS_COORD_POINTS_DISCRIMINATOR)
    return ERR_NOT_POINTS;
  const Points *pts = (const Points *)(account->data + DISCRIMINATOR_LEN);
  if (!sol_pubkey_eq(&pts->run, &t->run) || !sol_pubkey_eq(&pts->wallet, &m->wallet)) return ERR_WRONG_POINTS;
  /* the coordinator only writes Points at its PDA; checking the address too costs one hash, no bump search */
  SolSignerSeed seeds[4] = {{(const uint8_t *)POINTS_SEED, sizeof(POINTS_SEED) - 1},
                            {t->run.x, SIZE_PUBKEY},
                            {m->wallet.x, SIZE_PUBKEY},
                            {&pts->bump, 1}};
  SolPubkey expected;
  if (sol_create_program_address(seeds, 4, &t->coordinator, &expected) != SUCCESS ||
      !sol_pubkey_eq(&expected, account->key))
    return ERR_WRONG_POINTS;
  *points = pts->points;
  return SUCCESS;
}

uint64_t claim(SolParameters *p) {
  const ClaimArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(need_accounts(p, ACC_CLAIM_COUNT));
  SolAccountInfo *ka = p->ka;
  ClaimAccounts a = {&ka[ACC_CLAIM_CLAIM_KEY], &ka[ACC_CLAIM_TREASURY], &ka[ACC_CLAIM_MEMBER],
                     &ka[ACC_CLAIM_POINTS],    &ka[ACC_CLAIM_VAULT],    &ka[ACC_CLAIM_DESTINATION],
                     &ka[ACC_CLAIM_MINT],      &ka[ACC_CLAIM_TOKEN_PROGRAM]};
  TRY(check_signer(a.claim_key));
  if (args->amount == 0) return ERR_ZERO_AMOUNT;
  Treasury *t;
  Member *m;
  TRY(load_treasury(p, a.treasury, true, &t));
  TRY(load_member(p, a.member, true, &m));
  if (!sol_pubkey_eq(&m->treasury, a.treasury->key)) return ERR_WRONG_PDA;
  if (!sol_pubkey_eq(&m->claim_key, a.claim_key->key)) return ERR_WRONG_CLAIM_KEY;
  TRY(check_token_accounts(t, a.vault, a.mint, a.token_program));
  if (sol_pubkey_eq(a.destination->key, &t->vault)) return ERR_WRONG_VAULT; /* would count as paid */

  uint64_t points, entitlement;
  TRY(settled_points(&a, t, m, &points));
  if (!sol_mul_u64(points, t->reward_per_point, &entitlement)) return ERR_ARITHMETIC_OVERFLOW;
  uint64_t remaining = sol_sat_sub_u64(entitlement, m->claimed);
  if (remaining == 0) return ERR_NOTHING_TO_CLAIM;
  if (args->amount > remaining) return ERR_BEYOND_ENTITLEMENT;
  uint64_t in_vault, claimed, total;
  TRY(token_amount(a.vault, &in_vault));
  if (args->amount > in_vault) return ERR_VAULT_SHORT;
  if (!sol_add_u64(m->claimed, args->amount, &claimed) || !sol_add_u64(t->claimed, args->amount, &total))
    return ERR_ARITHMETIC_OVERFLOW;

  TreasurySigner signer;
  treasury_signer(t, &signer);
  TokenTransfer transfer = {a.token_program, a.vault, a.mint, a.destination, a.treasury};
  TRY(token_transfer_checked(&transfer, args->amount, t->decimals, &signer.signer));
  m->claimed = claimed;
  t->claimed = total;
  RewardClaimed event = {*a.treasury->key, m->wallet, *a.destination->key, args->amount, claimed, entitlement};
  emit(EVENT_REWARD_CLAIMED, &event, sizeof(event));
  return SUCCESS;
}
