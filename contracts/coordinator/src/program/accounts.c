#include "accounts.h"

uint64_t check_program_account(const SolParameters *p, const SolAccountInfo *a, uint64_t discriminator, uint64_t size,
                               bool writable) {
  if (!sol_pubkey_eq(a->owner, p->program_id)) return ERR_WRONG_ACCOUNT_OWNER;
  if (a->data_len != size) return ERR_WRONG_ACCOUNT_SIZE;
  if (sol_get_u64(a->data) != discriminator) return ERR_WRONG_DISCRIMINATOR;
  if (writable && !a->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  return SUCCESS;
}

uint64_t load_run(const SolParameters *p, SolAccountInfo *a, bool writable, Run **run) {
  uint64_t status = check_program_account(p, a, ACCOUNT_RUN, RUN_ACCOUNT_SIZE, writable);
  if (status != SUCCESS) return status;
  Run *r = (Run *)(a->data + DISCRIMINATOR_LEN);
  if (r->version != COORD_VERSION) return ERR_WRONG_VERSION;
  *run = r;
  return SUCCESS;
}

uint64_t check_signer(const SolAccountInfo *a) { return a->is_signer ? SUCCESS : ERR_MISSING_SIGNATURE; }

uint64_t close_account(SolAccountInfo *account, SolAccountInfo *to) {
  if (!to->is_writable || !account->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  uint64_t total;
  if (!sol_add_u64(*to->lamports, *account->lamports, &total)) return ERR_ARITHMETIC_OVERFLOW;
  *to->lamports = total;
  *account->lamports = 0;
  sol_memset(account->data, 0, account->data_len);
  sol_account_set_data_len(account, 0);
  return SUCCESS;
}

/* The SlotHashes data is read in place by the core (u64 count, then (u64 slot, [u8; 32] hash), newest
   first); the address check is what makes it the cluster's. */
uint64_t load_env(const SolAccountInfo *slot_hashes, const SolAccountInfo *run_account, CoordEnv *env) {
  if (!sol_pubkey_eq(slot_hashes->key, &COORD_SLOT_HASHES_ID)) return ERR_WRONG_SYSVAR;
  SolClock clock;
  uint64_t status = sol_get_clock_sysvar(&clock);
  if (status != SUCCESS) return status;
  env->now = clock.unix_timestamp;
  env->slot = clock.slot;
  env->slot_hashes = slot_hashes->data;
  env->slot_hashes_len = slot_hashes->data_len;
  env->run_key = run_account->key;
  return SUCCESS;
}

uint64_t args_of(const SolParameters *p, uint64_t size, const void **args) {
  if (p->data_len != DISCRIMINATOR_LEN + size) return ERR_INVALID_INSTRUCTION_DATA;
  *args = p->data + DISCRIMINATOR_LEN;
  return SUCCESS;
}
