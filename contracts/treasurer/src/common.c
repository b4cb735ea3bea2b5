/* Shared checks and calls (treasurer.h). */
#include "treasurer.h"

static const char TREASURY_SEED[] = "treasury";

uint64_t args_of(const SolParameters *p, uint64_t size, const void **args) {
  if (p->data_len != DISCRIMINATOR_LEN + size) return ERR_INVALID_INSTRUCTION_DATA;
  *args = p->data + DISCRIMINATOR_LEN;
  return SUCCESS;
}

uint64_t need_accounts(const SolParameters *p, uint64_t n) {
  return p->ka_num >= n ? SUCCESS : ERR_MISSING_ACCOUNTS;
}

uint64_t check_signer(const SolAccountInfo *a) { return a->is_signer ? SUCCESS : ERR_MISSING_SIGNATURE; }
uint64_t check_writable(const SolAccountInfo *a) { return a->is_writable ? SUCCESS : ERR_ACCOUNT_NOT_WRITABLE; }

static uint64_t check_own_account(const SolParameters *p, const SolAccountInfo *a, uint64_t discriminator,
                                  uint64_t size, bool writable) {
  if (!sol_pubkey_eq(a->owner, p->program_id)) return ERR_WRONG_ACCOUNT_OWNER;
  if (a->data_len != size) return ERR_WRONG_ACCOUNT_SIZE;
  if (sol_get_u64(a->data) != discriminator) return ERR_WRONG_DISCRIMINATOR;
  return writable ? check_writable(a) : SUCCESS;
}

uint64_t load_treasury(const SolParameters *p, const SolAccountInfo *a, bool writable, Treasury **out) {
  TRY(check_own_account(p, a, ACCOUNT_TREASURY, TREASURY_ACCOUNT_SIZE, writable));
  *out = (Treasury *)(a->data + DISCRIMINATOR_LEN);
  return SUCCESS;
}

uint64_t load_member(const SolParameters *p, const SolAccountInfo *a, bool writable, Member **out) {
  TRY(check_own_account(p, a, ACCOUNT_MEMBER, MEMBER_ACCOUNT_SIZE, writable));
  *out = (Member *)(a->data + DISCRIMINATOR_LEN);
  return SUCCESS;
}

uint64_t load_stake(const SolParameters *p, const SolAccountInfo *a, const SolAccountInfo *treasury, Stake **out) {
  TRY(check_own_account(p, a, ACCOUNT_STAKE, STAKE_ACCOUNT_SIZE, true));
  *out = (Stake *)(a->data + DISCRIMINATOR_LEN);
  return sol_pubkey_eq(&(*out)->treasury, treasury->key) ? SUCCESS : ERR_WRONG_PDA;
}

uint64_t check_token_accounts(const Treasury *t, const SolAccountInfo *vault, const SolAccountInfo *mint,
                              const SolAccountInfo *token_program) {
  if (!sol_pubkey_eq(token_program->key, &t->token_program)) return ERR_WRONG_PROGRAM;
  if (!sol_pubkey_eq(mint->key, &t->mint)) return ERR_WRONG_MINT;
  if (vault && !sol_pubkey_eq(vault->key, &t->vault)) return ERR_WRONG_VAULT;
  return SUCCESS;
}

uint64_t load_run(const SolAccountInfo *a, const SolPubkey *coordinator, const SolPubkey **authority) {
  if (!sol_pubkey_eq(a->owner, coordinator)) return ERR_WRONG_COORDINATOR;
  if (a->data_len != TREAS_COORD_RUN_SIZE || sol_get_u64(a->data) != TREAS_COORD_RUN_DISCRIMINATOR ||
      sol_get_u32(a->data + TREAS_COORD_RUN_VERSION_OFFSET) != TREAS_COORD_RUN_VERSION)
    return ERR_NOT_A_RUN;
  *authority = (const SolPubkey *)(a->data + TREAS_COORD_RUN_AUTHORITY_OFFSET);
  return SUCCESS;
}

bool account_gone(const SolAccountInfo *a, const SolPubkey *owner) {
  return a->data_len == 0 || *a->lamports == 0 || !sol_pubkey_eq(a->owner, owner);
}

/* ---- PDA creation through the System program (sol/pda.h), with this program's errors */

uint64_t create_pda(const NewPda *c, SolSignerSeed *seeds, int n, uint64_t space, uint8_t *bump) {
  if (!sol_is_system_program(c->system_program->key)) return ERR_WRONG_PROGRAM;
  TRY(check_writable(c->payer));
  TRY(check_writable(c->account));
  SolPubkey expected;
  TRY(sol_try_find_program_address(seeds, n, c->p->program_id, &expected, bump));
  if (!sol_pubkey_eq(&expected, c->account->key)) return ERR_WRONG_PDA;
  if (c->account->data_len != 0 || !sol_is_system_program(c->account->owner)) return ERR_ALREADY_INITIALIZED;
  seeds[n] = (SolSignerSeed){bump, 1};
  SolSignerSeeds signer = {seeds, (uint64_t)n + 1};
  SolNewPda pda = {c->payer, c->account, c->system_program, c->owner};
  return sol_create_pda(&pda, &signer, space);
}

uint64_t create_token_account(const NewTokenAccount *c, SolSignerSeed *seeds, int n, uint8_t *bump) {
  uint8_t size_ix[1] = {21}; /* GetAccountDataSize (no extra extensions requested) */
  SolAccountMeta size_metas[1] = {{c->mint->key, false, false}};
  SolInstruction size = {c->token_program->key, size_metas, 1, size_ix, sizeof(size_ix)};
  SolAccountInfo size_infos[2] = {*c->mint, *c->token_program};
  TRY(sol_invoke(&size, size_infos, 2));
  uint8_t returned[8];
  SolPubkey from;
  if (sol_get_return_data(returned, sizeof(returned), &from) != sizeof(returned) ||
      !sol_pubkey_eq(&from, c->token_program->key))
    return ERR_WRONG_MINT;
  NewPda account = {c->p, c->payer, c->account, c->system_program, c->token_program->key};
  TRY(create_pda(&account, seeds, n, sol_get_u64(returned), bump));
  uint8_t init[1 + SIZE_PUBKEY] = {18}; /* InitializeAccount3: owner */
  sol_memcpy(init + 1, c->owner->x, SIZE_PUBKEY);
  SolAccountMeta metas[2] = {{c->account->key, true, false}, {c->mint->key, false, false}};
  SolInstruction ix = {c->token_program->key, metas, 2, init, sizeof(init)};
  SolAccountInfo infos[3] = {*c->account, *c->mint, *c->token_program};
  return sol_invoke(&ix, infos, 3);
}

uint64_t close_account(SolAccountInfo *account, SolAccountInfo *to) {
  TRY(check_writable(to));
  TRY(check_writable(account));
  uint64_t total;
  if (!sol_add_u64(*to->lamports, *account->lamports, &total)) return ERR_ARITHMETIC_OVERFLOW;
  *to->lamports = total;
  *account->lamports = 0;
  sol_memset(account->data, 0, account->data_len);
  sol_account_set_data_len(account, 0);
  return SUCCESS;
}

/* ---- token program calls */

uint64_t token_transfer_checked(const TokenTransfer *t, uint64_t amount, uint8_t decimals,
                                const SolSignerSeeds *signer) {
  uint8_t data[1 + 8 + 1] = {12}; /* TransferChecked: amount u64, decimals u8 */
  sol_put_u64(data + 1, amount);
  data[9] = decimals;
  SolAccountMeta metas[4] = {{t->from->key, true, false},
                             {t->mint->key, false, false},
                             {t->to->key, true, false},
                             {t->authority->key, false, true}};
  SolInstruction ix = {t->token_program->key, metas, 4, data, sizeof(data)};
  SolAccountInfo infos[5] = {*t->from, *t->mint, *t->to, *t->authority, *t->token_program};
  return sol_invoke_signed_c(&ix, infos, 5, signer, signer ? 1 : 0);
}

uint64_t token_close_account(const TokenTransfer *t, const SolSignerSeeds *signer) {
  uint8_t data[1] = {9}; /* CloseAccount: lamports to `to` */
  SolAccountMeta metas[3] = {{t->from->key, true, false}, {t->to->key, true, false}, {t->authority->key, false, true}};
  SolInstruction ix = {t->token_program->key, metas, 3, data, sizeof(data)};
  SolAccountInfo infos[4] = {*t->from, *t->to, *t->authority, *t->token_program};
  return sol_invoke_signed_c(&ix, infos, 4, signer, signer ? 1 : 0);
}

uint64_t token_amount(const SolAccountInfo *account, uint64_t *amount) {
  if (account->data_len < TOKEN_ACCOUNT_BASE_LEN) return ERR_WRONG_VAULT;
  *amount = sol_get_u64(account->data + TOKEN_ACCOUNT_AMOUNT_OFFSET);
  return SUCCESS;
}

void treasury_signer(const Treasury *t, TreasurySigner *out) {
  out->seeds[0] = (SolSignerSeed){(const uint8_t *)TREASURY_SEED, sizeof(TREASURY_SEED) - 1};
  out->seeds[1] = (SolSignerSeed){t->run.x, SIZE_PUBKEY};
  out->seeds[2] = (SolSignerSeed){&t->bump, 1};
  out->signer = (SolSignerSeeds){out->seeds, 3};
}

void emit(uint64_t discriminator, const void *body, uint64_t len) {
  uint8_t buffer[256];
  if (len > sizeof(buffer) - DISCRIMINATOR_LEN) sol_panic();
  sol_put_u64(buffer, discriminator);
  sol_memcpy(buffer + DISCRIMINATOR_LEN, body, len);
  SolBytes field = {buffer, DISCRIMINATOR_LEN + len};
  sol_log_data(&field, 1);
}
