/* Account checks shared by the instruction handlers: each returns 0 or the ERR_* naming what is wrong. */
#pragma once
#include <sol.h>

#include "../core/coordinator.h"

#define DISCRIMINATOR_LEN 8
#define RUN_ACCOUNT_SIZE (DISCRIMINATOR_LEN + sizeof(Run))
#define RUN_INDEX_ACCOUNT_SIZE (DISCRIMINATOR_LEN + sizeof(RunIndex))
#define JOIN_AUTHORIZATION_ACCOUNT_SIZE (DISCRIMINATOR_LEN + sizeof(JoinAuthorization))
#define POINTS_ACCOUNT_SIZE (DISCRIMINATOR_LEN + sizeof(Points))
#define ENDPOINT_ACCOUNT_SIZE (DISCRIMINATOR_LEN + sizeof(Endpoint))
#define TRY(expr)                           \
  do {                                      \
    uint64_t status_ = (expr);              \
    if (status_ != SUCCESS) return status_; \
  } while (0)

/* A program-owned account of the given type (discriminator and exact size), writable if asked. */
uint64_t check_program_account(const SolParameters *p, const SolAccountInfo *a, uint64_t discriminator, uint64_t size,
                               bool writable);
/* The Run account: as above, plus a layout version this program understands. */
uint64_t load_run(const SolParameters *p, SolAccountInfo *a, bool writable, Run **run);
uint64_t check_signer(const SolAccountInfo *a);
/* Close a program-owned account: its lamports go to `to`, its data is zeroed and dropped. */
uint64_t close_account(SolAccountInfo *account, SolAccountInfo *to);
/* The chain's view of now for the core: Clock time and slot, the SlotHashes data, the run's address. */
uint64_t load_env(const SolAccountInfo *slot_hashes, const SolAccountInfo *run_account, CoordEnv *env);
/* Instruction arguments of exactly `size` bytes after the discriminator (read in place: 8-aligned). */
uint64_t args_of(const SolParameters *p, uint64_t size, const void **args);
