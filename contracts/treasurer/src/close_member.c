/* close_member: the wallet closes its Member account (rent back) once it can claim nothing more with it:
   its treasury is closed, or its coordinator Points account is (then the entitlement is gone: claim first).
   While both live, closing would reset `claimed` and let the points be paid twice. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *wallet, *member, *treasury, *points;
} CloseMemberAccounts;

static const char POINTS_SEED[] = "points";

uint64_t close_member(SolParameters *p) {
  TRY(need_accounts(p, ACC_CLOSE_MEMBER_COUNT));
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  SolAccountInfo *ka = p->ka;
  CloseMemberAccounts a = {&ka[ACC_CLOSE_MEMBER_WALLET], &ka[ACC_CLOSE_MEMBER_MEMBER],
                           &ka[ACC_CLOSE_MEMBER_TREASURY], &ka[ACC_CLOSE_MEMBER_POINTS]};
  TRY(check_signer(a.wallet));
  Member *m;
  TRY(load_member(p, a.member, true, &m));
  if (!sol_pubkey_eq(&m->wallet, a.wallet->key)) return ERR_WRONG_PDA; /* another wallet's Member */
  if (!sol_pubkey_eq(&m->treasury, a.treasury->key)) return ERR_WRONG_PDA;
  if (!account_gone(a.treasury, p->program_id)) {
    Treasury *t;
    TRY(load_treasury(p, a.treasury, false, &t));
    SolSignerSeed seeds[3] = {{(const uint8_t *)POINTS_SEED, sizeof(POINTS_SEED) - 1},
                              {t->run.x, SIZE_PUBKEY},
                              {m->wallet.x, SIZE_PUBKEY}};
    SolPubkey expected;
    uint8_t bump;
    TRY(sol_try_find_program_address(seeds, 3, &t->coordinator, &expected, &bump));
    if (!sol_pubkey_eq(&expected, a.points->key)) return ERR_WRONG_POINTS;
    if (!account_gone(a.points, &t->coordinator)) return ERR_POINTS_REMAIN;
  }
  return close_account(a.member, a.wallet);
}
