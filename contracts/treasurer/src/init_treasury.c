/* init_treasury: the run's authority creates the treasury PDA ["treasury", run] and its vault, a token
   account of the mint at PDA ["vault", treasury] whose owner is the treasury, and states the payout rule. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *payer, *authority, *run, *treasury, *vault, *mint, *token_program, *system_program;
} InitTreasuryAccounts;

static const char TREASURY_SEED[] = "treasury";
static const char VAULT_SEED[] = "vault";

/* Token-2022 mint extensions that let someone other than the treasury take, hold back or tax the vault's
   tokens, or need accounts a plain transfer_checked does not pass (ExtensionType numbers). */
static bool refused_extension(uint16_t type) {
  return type == 1 /* TransferFeeConfig */ || type == 6 /* DefaultAccountState */ ||
         type == 9 /* NonTransferable */ || type == 12 /* PermanentDelegate */ || type == 14 /* TransferHook */ ||
         type == 26 /* Pausable */;
}

/* A mint of `token_program`: initialized, and (Token-2022) none of the refused extensions. Its TLV entries
   follow the 165-byte base (padded) and the account-type byte. */
static uint64_t check_mint(const InitTreasuryAccounts *a, uint8_t *decimals) {
  const SolAccountInfo *mint = a->mint;
  bool classic = sol_pubkey_eq(a->token_program->key, &TREAS_TOKEN_PROGRAM_ID);
  if (!classic && !sol_pubkey_eq(a->token_program->key, &TREAS_TOKEN_2022_PROGRAM_ID)) return ERR_WRONG_PROGRAM;
  if (!sol_pubkey_eq(mint->owner, a->token_program->key) || mint->data_len < MINT_BASE_LEN ||
      mint->data[MINT_INITIALIZED_OFFSET] != 1)
    return ERR_WRONG_MINT;
  if (mint->data_len > MINT_BASE_LEN) {
    if (classic || mint->data_len <= TOKEN_ACCOUNT_BASE_LEN || mint->data[TOKEN_ACCOUNT_BASE_LEN] != 1)
      return ERR_WRONG_MINT;
    for (uint64_t at = TOKEN_ACCOUNT_BASE_LEN + 1; at + 4 <= mint->data_len;) {
      uint16_t type = (uint16_t)(mint->data[at] | (mint->data[at + 1] << 8));
      uint64_t len = (uint64_t)(mint->data[at + 2] | (mint->data[at + 3] << 8));
      if (type == 0) break; /* Uninitialized: the rest is unused space */
      if (refused_extension(type)) return ERR_UNSUPPORTED_MINT;
      at += 4 + len;
    }
  }
  *decimals = mint->data[MINT_DECIMALS_OFFSET];
  return SUCCESS;
}

/* The vault: sized by the token program for this mint (GetAccountDataSize), created at its PDA owned by
   the token program, then InitializeAccount3 with the treasury as its owner. */
static uint64_t create_vault(const SolParameters *p, const InitTreasuryAccounts *a, uint8_t *bump) {
  SolSignerSeed seeds[3] = {{(const uint8_t *)VAULT_SEED, sizeof(VAULT_SEED) - 1}, {a->treasury->key->x, SIZE_PUBKEY}};
  NewTokenAccount vault = {p, a->payer, a->vault, a->mint, a->token_program, a->system_program, a->treasury->key};
  return create_token_account(&vault, seeds, 2, bump);
}

uint64_t init_treasury(SolParameters *p) {
  const InitTreasuryArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(need_accounts(p, ACC_INIT_TREASURY_COUNT));
  SolAccountInfo *ka = p->ka;
  InitTreasuryAccounts a = {&ka[ACC_INIT_TREASURY_PAYER], &ka[ACC_INIT_TREASURY_AUTHORITY],
                            &ka[ACC_INIT_TREASURY_RUN], &ka[ACC_INIT_TREASURY_TREASURY],
                            &ka[ACC_INIT_TREASURY_VAULT], &ka[ACC_INIT_TREASURY_MINT],
                            &ka[ACC_INIT_TREASURY_TOKEN_PROGRAM], &ka[ACC_INIT_TREASURY_SYSTEM_PROGRAM]};
  TRY(check_signer(a.payer));
  TRY(check_signer(a.authority));
  if (args->reward_per_point == 0 || args->claim_window < 0) return ERR_INVALID_RATE;
  /* The run's owner becomes the treasury's coordinator: only whoever holds the run's key could have created
     an account at its address, so a treasury of a real run is bound to the real coordinator. */
  const SolPubkey *authority;
  TRY(load_run(a.run, a.run->owner, &authority));
  if (!sol_pubkey_eq(authority, a.authority->key)) return ERR_UNAUTHORIZED;
  uint8_t decimals;
  TRY(check_mint(&a, &decimals));

  SolSignerSeed seeds[3] = {{(const uint8_t *)TREASURY_SEED, sizeof(TREASURY_SEED) - 1}, {a.run->key->x, SIZE_PUBKEY}};
  uint8_t bump, vault_bump;
  NewPda treasury = {p, a.payer, a.treasury, a.system_program, p->program_id};
  TRY(create_pda(&treasury, seeds, 2, TREASURY_ACCOUNT_SIZE, &bump));
  TRY(create_vault(p, &a, &vault_bump));

  sol_put_u64(a.treasury->data, ACCOUNT_TREASURY);
  Treasury *t = (Treasury *)(a.treasury->data + DISCRIMINATOR_LEN);
  t->bump = bump;
  t->vault_bump = vault_bump;
  t->decimals = decimals;
  t->run = *a.run->key;
  t->coordinator = *a.run->owner;
  t->authority = *a.authority->key;
  t->payer = *a.payer->key;
  t->mint = *a.mint->key;
  t->token_program = *a.token_program->key;
  t->vault = *a.vault->key;
  t->reward_per_point = args->reward_per_point;
  t->claim_window = args->claim_window;
  return SUCCESS;
}
