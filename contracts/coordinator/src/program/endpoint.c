#include "endpoint.h"

#include "accounts.h"
#include "pda.h"

static const char ENDPOINT_SEED[] = "endpoint";

/* An existing account at `a` must be this wallet's Endpoint of this run. */
static uint64_t check_endpoint(const SolParameters *p, const SolAccountInfo *a) {
  TRY(check_program_account(p, a, ACCOUNT_ENDPOINT, ENDPOINT_ACCOUNT_SIZE, true));
  const Endpoint *e = (const Endpoint *)(a->data + DISCRIMINATOR_LEN);
  return sol_pubkey_eq(&e->run, p->ka[1].key) && sol_pubkey_eq(&e->wallet, p->ka[0].key) ? SUCCESS : ERR_WRONG_PDA;
}

uint64_t write_endpoint(const SolParameters *p, uint64_t at, const JoinRunArgs *args, uint64_t join_marker) {
  SolAccountInfo *user = &p->ka[0], *account = &p->ka[at];
  if (!user->is_writable || !account->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  if (!sol_is_system_program(p->ka[at + 1].key)) return ERR_WRONG_PROGRAM;
  const SolPubkey *run = p->ka[1].key;
  if (account->data_len == 0) {
    SolSignerSeed seeds[4] = {{(const uint8_t *)ENDPOINT_SEED, sizeof(ENDPOINT_SEED) - 1},
                              {run->x, SIZE_PUBKEY},
                              {user->key->x, SIZE_PUBKEY}};
    uint8_t bump;
    NewAccount fresh = {p, user, account, &p->ka[at + 1]};
    TRY(create_pda_at(&fresh, seeds, 3, ENDPOINT_ACCOUNT_SIZE, &bump));
    sol_put_u64(account->data, ACCOUNT_ENDPOINT);
    Endpoint *e = (Endpoint *)(account->data + DISCRIMINATOR_LEN);
    e->bump = bump;
    e->run = *run;
    e->wallet = *user->key;
  } else {
    TRY(check_endpoint(p, account));
  }
  Endpoint *e = (Endpoint *)(account->data + DISCRIMINATOR_LEN);
  e->p2p_identity = args->p2p_identity;
  e->join_marker = join_marker;
  sol_memcpy(e->endpoint, args->endpoint, COORD_ENDPOINT_LEN);
  return SUCCESS;
}

bool endpoint_differs(const SolParameters *p, uint64_t at, const JoinRunArgs *args) {
  const SolAccountInfo *account = &p->ka[at];
  if (account->data_len == 0) return true;
  if (check_endpoint(p, account) != SUCCESS) return false; /* not ours: write_endpoint would refuse it */
  const Endpoint *e = (const Endpoint *)(account->data + DISCRIMINATOR_LEN);
  return sol_memcmp(e->endpoint, args->endpoint, COORD_ENDPOINT_LEN) != 0 || !sol_pubkey_eq(&e->p2p_identity, &args->p2p_identity);
}

/* Whether `a` is the address of the wallet's Endpoint PDA of this run. */
static uint64_t check_endpoint_address(const SolParameters *p, const SolAccountInfo *a) {
  SolSignerSeed seeds[3] = {{(const uint8_t *)ENDPOINT_SEED, sizeof(ENDPOINT_SEED) - 1},
                            {p->ka[1].key->x, SIZE_PUBKEY},
                            {p->ka[0].key->x, SIZE_PUBKEY}};
  SolPubkey expected;
  uint8_t bump;
  TRY(sol_try_find_program_address(seeds, 3, p->program_id, &expected, &bump));
  return sol_pubkey_eq(&expected, a->key) ? SUCCESS : ERR_WRONG_PDA;
}

uint64_t close_endpoint(const SolParameters *p, uint64_t at) {
  SolAccountInfo *user = &p->ka[0], *account = &p->ka[at];
  /* never joined with one (or already closed): only the wallet's own address says so, not any empty account */
  if (account->data_len == 0) return check_endpoint_address(p, account);
  TRY(check_endpoint(p, account));
  return close_account(account, user);
}

/* [wallet, endpoint, run]: the Endpoint outlives the registry entry when the wallet did not exit_run (it
   was pruned, or the run was closed): then its wallet closes it. */
uint64_t close_stale_endpoint(const SolParameters *p, bool run_closed) {
  SolAccountInfo *wallet = &p->ka[0], *account = &p->ka[1], *run_account = &p->ka[2];
  TRY(check_program_account(p, account, ACCOUNT_ENDPOINT, ENDPOINT_ACCOUNT_SIZE, true));
  const Endpoint *e = (const Endpoint *)(account->data + DISCRIMINATOR_LEN);
  if (!sol_pubkey_eq(&e->wallet, wallet->key) || !sol_pubkey_eq(&e->run, run_account->key)) return ERR_WRONG_PDA;
  if (!run_closed) {
    Run *run;
    TRY(load_run(p, run_account, false, &run));
    if (coord_registered(run, wallet->key)) return ERR_RUN_STILL_OPEN; /* exit_run closes it */
  }
  return close_account(account, wallet);
}
