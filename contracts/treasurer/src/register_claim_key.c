/* register_claim_key: the wallet names, once, the key that claims its rewards from this treasury. The
   wallet is the node's hot key (it signs every coordinator instruction); the claim key can stay cold, and
   since it can never be replaced, a stolen hot wallet cannot redirect the rewards. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *wallet, *treasury, *member, *system_program;
} RegisterClaimKeyAccounts;

static const char MEMBER_SEED[] = "member";

uint64_t register_claim_key(SolParameters *p) {
  const RegisterClaimKeyArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(need_accounts(p, ACC_REGISTER_CLAIM_KEY_COUNT));
  SolAccountInfo *ka = p->ka;
  RegisterClaimKeyAccounts a = {&ka[ACC_REGISTER_CLAIM_KEY_WALLET], &ka[ACC_REGISTER_CLAIM_KEY_TREASURY],
                                &ka[ACC_REGISTER_CLAIM_KEY_MEMBER], &ka[ACC_REGISTER_CLAIM_KEY_SYSTEM_PROGRAM]};
  TRY(check_signer(a.wallet));
  if (sol_is_system_program(&args->claim_key)) return ERR_INVALID_CLAIM_KEY; /* the zero key */
  Treasury *t;
  TRY(load_treasury(p, a.treasury, false, &t));
  SolSignerSeed seeds[4] = {{(const uint8_t *)MEMBER_SEED, sizeof(MEMBER_SEED) - 1},
                            {a.treasury->key->x, SIZE_PUBKEY},
                            {a.wallet->key->x, SIZE_PUBKEY}};
  uint8_t bump;
  NewPda member = {p, a.wallet, a.member, a.system_program, p->program_id};
  TRY(create_pda(&member, seeds, 3, MEMBER_ACCOUNT_SIZE, &bump));
  sol_put_u64(a.member->data, ACCOUNT_MEMBER);
  Member *m = (Member *)(a.member->data + DISCRIMINATOR_LEN);
  m->bump = bump;
  m->treasury = *a.treasury->key;
  m->wallet = *a.wallet->key;
  m->claim_key = args->claim_key;
  return SUCCESS;
}
