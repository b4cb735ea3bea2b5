/* The treasurer's shared pieces: account checks, the coordinator accounts it reads, the token program calls
   it makes, and PDA creation. Every instruction is one file (init_treasury.c, fund.c, ...) with a struct
   naming its accounts by the generated ACC_ indices. */
#pragma once
#include <sol.h>

#include "generated/abi.h"
#include "generated/ix_accounts.h"

#define TRY(expr)                           \
  do {                                      \
    uint64_t status_ = (expr);              \
    if (status_ != SUCCESS) return status_; \
  } while (0)

#define DISCRIMINATOR_LEN 8
#define TREASURY_ACCOUNT_SIZE (DISCRIMINATOR_LEN + sizeof(Treasury))
#define MEMBER_ACCOUNT_SIZE (DISCRIMINATOR_LEN + sizeof(Member))
#define STAKE_ACCOUNT_SIZE (DISCRIMINATOR_LEN + sizeof(Stake))

/* Token account and mint layouts shared by SPL Token and Token-2022 (the base before any extension). */
#define TOKEN_ACCOUNT_BASE_LEN 165
#define TOKEN_ACCOUNT_AMOUNT_OFFSET 64
#define MINT_BASE_LEN 82
#define MINT_DECIMALS_OFFSET 44
#define MINT_INITIALIZED_OFFSET 45

/* Instruction dispatch. */
uint64_t init_treasury(SolParameters *p);
uint64_t fund(SolParameters *p);
uint64_t set_rate(SolParameters *p);
uint64_t register_claim_key(SolParameters *p);
uint64_t claim(SolParameters *p);
uint64_t mark_run_closed(SolParameters *p);
uint64_t close_treasury(SolParameters *p);
uint64_t close_member(SolParameters *p);
uint64_t init_stakes(SolParameters *p);
uint64_t stake(SolParameters *p);
uint64_t unstake(SolParameters *p);
uint64_t withdraw_stake(SolParameters *p);
uint64_t slash(SolParameters *p);

/* The instruction's arguments, exactly `size` bytes after the discriminator. */
uint64_t args_of(const SolParameters *p, uint64_t size, const void **args);
uint64_t need_accounts(const SolParameters *p, uint64_t n);
uint64_t check_signer(const SolAccountInfo *a);
uint64_t check_writable(const SolAccountInfo *a);

/* This program's Treasury / Member account (owner, exact size, discriminator, and writable if asked). */
uint64_t load_treasury(const SolParameters *p, const SolAccountInfo *a, bool writable, Treasury **out);
uint64_t load_member(const SolParameters *p, const SolAccountInfo *a, bool writable, Member **out);
/* A Stake account of this treasury. */
uint64_t load_stake(const SolParameters *p, const SolAccountInfo *a, const SolAccountInfo *treasury, Stake **out);
/* The treasury's own mint, vault and token program (the ones it was created with). */
uint64_t check_token_accounts(const Treasury *t, const SolAccountInfo *vault, const SolAccountInfo *mint,
                              const SolAccountInfo *token_program);

/* A coordinator Run account: owned by `coordinator`, of the layout this treasurer was built against
   (size, discriminator, version); `authority` is read from it. */
uint64_t load_run(const SolAccountInfo *a, const SolPubkey *coordinator, const SolPubkey **authority);
/* An account that no longer holds what it held: closed (empty) or owned by another program now. */
bool account_gone(const SolAccountInfo *a, const SolPubkey *owner);

/* Send `space` rent-exempt bytes to the PDA of seeds[0..n) (seeds[n] gets the bump) owned by `owner`, also
   when someone already sent lamports to the address (else a few lamports would block it for good). */
typedef struct {
  const SolParameters *p;
  const SolAccountInfo *payer;
  SolAccountInfo *account;
  const SolAccountInfo *system_program;
  const SolPubkey *owner;
} NewPda;
uint64_t create_pda(const NewPda *c, SolSignerSeed *seeds, int n, uint64_t space, uint8_t *bump);

/* A token account of `mint` at the PDA of seeds[0..n) (seeds[n] gets the bump) owned by `owner`: sized by the
   token program for this mint (GetAccountDataSize, no extra extensions), created, then InitializeAccount3. */
typedef struct {
  const SolParameters *p;
  const SolAccountInfo *payer;
  SolAccountInfo *account;
  const SolAccountInfo *mint, *token_program, *system_program;
  const SolPubkey *owner;
} NewTokenAccount;
uint64_t create_token_account(const NewTokenAccount *c, SolSignerSeed *seeds, int n, uint8_t *bump);

/* Move lamports and zero the data: the account is closed when the transaction ends. */
uint64_t close_account(SolAccountInfo *account, SolAccountInfo *to);

/* Token program calls. The authority signs with `signer` (the treasury PDA's seeds) or itself (NULL). */
typedef struct {
  const SolAccountInfo *token_program;
  const SolAccountInfo *from;
  const SolAccountInfo *mint;
  const SolAccountInfo *to;
  const SolAccountInfo *authority;
} TokenTransfer;
uint64_t token_transfer_checked(const TokenTransfer *t, uint64_t amount, uint8_t decimals,
                                const SolSignerSeeds *signer);
uint64_t token_close_account(const TokenTransfer *t, const SolSignerSeeds *signer);
/* The amount a token account holds (its base layout is the same under both token programs). */
uint64_t token_amount(const SolAccountInfo *account, uint64_t *amount);

/* The treasury PDA's signer seeds ["treasury", run, bump]. */
typedef struct {
  SolSignerSeed seeds[3];
  SolSignerSeeds signer;
} TreasurySigner;
void treasury_signer(const Treasury *t, TreasurySigner *out);

/* Anchor event: discriminator + body in one "Program data:" field. */
void emit(uint64_t discriminator, const void *body, uint64_t len);

/* ---- the treasury as a run's join authority (joiner.c) */

/* The PDA ["joiner", treasury] that a staking run names as its join authority: a plain system account (no
   data) so that it can pay for the coordinator's JoinAuthorization accounts and take their rent back. */
typedef struct {
  const SolParameters *p;
  const SolAccountInfo *treasury;
  const Treasury *t;
  SolAccountInfo *run;           /* the coordinator's Run (writable) */
  SolAccountInfo *authorization; /* the coordinator's JoinAuthorization ["join", run, wallet] */
  SolAccountInfo *joiner;        /* the PDA ["joiner", treasury] */
  const SolAccountInfo *coordinator_program;
  const SolAccountInfo *system_program;
} Joiner;
/* The joiner PDA of `treasury` and its bump (searched). */
uint64_t find_joiner(const SolParameters *p, const SolPubkey *treasury, SolPubkey *address, uint8_t *bump);
/* Checks of the accounts every joiner call needs (the joiner's address, the coordinator, the System program). */
uint64_t check_joiner(const Joiner *j);
/* `payer` funds the JoinAuthorization's rent through the joiner, which grants `wallet` the right to join. */
uint64_t joiner_authorize(const Joiner *j, const SolAccountInfo *payer, const SolPubkey *wallet);
/* The joiner closes the wallet's JoinAuthorization (a pending join is withdrawn) and hands its rent to `to`. */
uint64_t joiner_revoke(const Joiner *j, SolAccountInfo *to);
/* Is `wallet` in the Run's registry (joined and not exited)? */
bool run_registers(const SolAccountInfo *run, const SolPubkey *wallet);
