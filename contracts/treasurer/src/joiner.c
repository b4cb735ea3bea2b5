/* The treasury as a run's join authority: the coordinator's set_join_authorization and
   close_join_authorization called by the joiner PDA (treasurer.h). */
#include "treasurer.h"

static const char JOINER_SEED[] = "joiner";

uint64_t find_joiner(const SolParameters *p, const SolPubkey *treasury, SolPubkey *address, uint8_t *bump) {
  SolSignerSeed seeds[2] = {{(const uint8_t *)JOINER_SEED, sizeof(JOINER_SEED) - 1}, {treasury->x, SIZE_PUBKEY}};
  return sol_try_find_program_address(seeds, 2, p->program_id, address, bump);
}

typedef struct {
  SolSignerSeed seeds[3];
  SolSignerSeeds signer;
} JoinerSigner;

static void joiner_signer(const Joiner *j, JoinerSigner *out) {
  out->seeds[0] = (SolSignerSeed){(const uint8_t *)JOINER_SEED, sizeof(JOINER_SEED) - 1};
  out->seeds[1] = (SolSignerSeed){j->treasury->key->x, SIZE_PUBKEY};
  out->seeds[2] = (SolSignerSeed){&j->t->joiner_bump, 1};
  out->signer = (SolSignerSeeds){out->seeds, 3};
}

uint64_t check_joiner(const Joiner *j) {
  if (j->t->stake_amount == 0) return ERR_STAKES_OFF;
  if (!sol_pubkey_eq(j->run->key, &j->t->run)) return ERR_WRONG_RUN;
  if (!sol_pubkey_eq(j->coordinator_program->key, &j->t->coordinator)) return ERR_WRONG_COORDINATOR;
  if (!sol_is_system_program(j->system_program->key)) return ERR_WRONG_PROGRAM;
  JoinerSigner s;
  joiner_signer(j, &s);
  SolPubkey expected;
  if (sol_create_program_address(s.seeds, 3, j->p->program_id, &expected) != SUCCESS ||
      !sol_pubkey_eq(&expected, j->joiner->key))
    return ERR_WRONG_PDA;
  return SUCCESS;
}

/* A System program Transfer of `lamports` (the joiner signs when it is the sender). */
static uint64_t transfer(const Joiner *j, const SolAccountInfo *from, const SolAccountInfo *to, uint64_t lamports,
                         const SolSignerSeeds *signer) {
  uint8_t data[4 + 8] = {2}; /* u32 tag 2 = Transfer, u64 lamports */
  sol_put_u64(data + 4, lamports);
  SolAccountMeta metas[2] = {{from->key, true, true}, {to->key, true, false}};
  SolInstruction ix = {j->system_program->key, metas, 2, data, sizeof(data)};
  SolAccountInfo infos[3] = {*from, *to, *j->system_program};
  return sol_invoke_signed_c(&ix, infos, 3, signer, signer ? 1 : 0);
}

uint64_t joiner_authorize(const Joiner *j, const SolAccountInfo *payer, const SolPubkey *wallet) {
  uint64_t rent;
  TRY(sol_rent_exempt_minimum(TREAS_COORD_JOIN_AUTHORIZATION_SIZE, &rent));
  if (j->authorization->data_len == 0 && *j->joiner->lamports < rent)
    TRY(transfer(j, payer, j->joiner, rent - *j->joiner->lamports, NULL));
  uint8_t data[DISCRIMINATOR_LEN + TREAS_COORD_SET_JOIN_AUTHORIZATION_ARGS_SIZE] = {0}; /* grantee, allowed */
  sol_put_u64(data, TREAS_COORD_IX_SET_JOIN_AUTHORIZATION);
  sol_memcpy(data + DISCRIMINATOR_LEN, wallet->x, SIZE_PUBKEY);
  data[DISCRIMINATOR_LEN + SIZE_PUBKEY] = 1;
  SolAccountMeta metas[4] = {{j->joiner->key, true, true},
                             {j->run->key, true, false},
                             {j->authorization->key, true, false},
                             {j->system_program->key, false, false}};
  SolInstruction ix = {j->coordinator_program->key, metas, 4, data, sizeof(data)};
  SolAccountInfo infos[5] = {*j->joiner, *j->run, *j->authorization, *j->system_program, *j->coordinator_program};
  JoinerSigner s;
  joiner_signer(j, &s);
  return sol_invoke_signed_c(&ix, infos, 5, &s.signer, 1);
}

uint64_t joiner_revoke(const Joiner *j, SolAccountInfo *to) {
  if (j->authorization->data_len == 0) return SUCCESS; /* nothing granted (or already closed) */
  uint64_t rent = *j->authorization->lamports;
  uint8_t data[DISCRIMINATOR_LEN];
  sol_put_u64(data, TREAS_COORD_IX_CLOSE_JOIN_AUTHORIZATION);
  SolAccountMeta metas[3] = {{j->joiner->key, true, true}, {j->run->key, true, false}, {j->authorization->key, true, false}};
  SolInstruction ix = {j->coordinator_program->key, metas, 3, data, sizeof(data)};
  SolAccountInfo infos[4] = {*j->joiner, *j->run, *j->authorization, *j->coordinator_program};
  JoinerSigner s;
  joiner_signer(j, &s);
  TRY(sol_invoke_signed_c(&ix, infos, 4, &s.signer, 1));
  return transfer(j, j->joiner, to, rent, &s.signer);
}

bool run_registers(const SolAccountInfo *run, const SolPubkey *wallet) {
  uint32_t len = sol_get_u32(run->data + TREAS_COORD_RUN_REGISTRY_LEN_OFFSET);
  if (len > TREAS_COORD_MAX_CLIENTS) len = TREAS_COORD_MAX_CLIENTS;
  const uint8_t *entry = run->data + TREAS_COORD_RUN_REGISTRY_OFFSET + TREAS_COORD_REGISTRY_SIGNER_OFFSET;
  for (uint32_t i = 0; i < len; i++, entry += TREAS_COORD_REGISTRY_ENTRY_SIZE)
    if (sol_pubkey_eq((const SolPubkey *)entry, wallet)) return true;
  return false;
}
