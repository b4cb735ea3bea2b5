/* slash: anyone shows that the Run convicted the stake's wallet: the client entry at `index` is the wallet,
   Convicted (the current epoch's list), or the registry entry at `index` is the wallet and records a conviction
   (banned_until, kept for the conviction's ban). The stake goes to the reward pool (the vault members are paid
   from) and the wallet's authorization to join ends, its rent going to the reporter. A banned wallet cannot
   leave the registry (exit_run refuses it), so it cannot unstake: the ban is the window to slash in. */
#include "treasurer.h"

typedef struct {
  SolAccountInfo *reporter, *treasury, *stake, *run, *authorization, *joiner, *stake_vault, *vault, *mint,
      *token_program, *coordinator_program, *system_program;
} SlashAccounts;

static bool convicted_in_epoch(const uint8_t *data, uint16_t index, const SolPubkey *wallet) {
  uint32_t len = sol_get_u32(data + TREAS_COORD_RUN_CLIENTS_LEN_OFFSET);
  if (index >= len || index >= TREAS_COORD_MAX_CLIENTS) return false;
  const uint8_t *client = data + TREAS_COORD_RUN_CLIENTS_OFFSET + (uint64_t)index * TREAS_COORD_CLIENT_SIZE;
  return sol_pubkey_eq((const SolPubkey *)(client + TREAS_COORD_CLIENT_SIGNER_OFFSET), wallet) &&
         client[TREAS_COORD_CLIENT_STATE_OFFSET] == TREAS_COORD_CLIENT_CONVICTED;
}

static bool convicted_in_registry(const uint8_t *data, uint16_t index, const SolPubkey *wallet) {
  uint32_t len = sol_get_u32(data + TREAS_COORD_RUN_REGISTRY_LEN_OFFSET);
  if (index >= len || index >= TREAS_COORD_MAX_CLIENTS) return false;
  const uint8_t *entry = data + TREAS_COORD_RUN_REGISTRY_OFFSET + (uint64_t)index * TREAS_COORD_REGISTRY_ENTRY_SIZE;
  return sol_pubkey_eq((const SolPubkey *)(entry + TREAS_COORD_REGISTRY_SIGNER_OFFSET), wallet) &&
         sol_get_u32(entry + TREAS_COORD_REGISTRY_BANNED_UNTIL_OFFSET) != 0;
}

/* The Run's size and version were checked (load_run), so every offset is inside it. */
static uint64_t check_convicted(const SolAccountInfo *run, uint16_t index, const SolPubkey *wallet) {
  if (convicted_in_epoch(run->data, index, wallet) || convicted_in_registry(run->data, index, wallet)) return SUCCESS;
  return ERR_NOT_CONVICTED;
}

uint64_t slash(SolParameters *p) {
  const SlashArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(need_accounts(p, ACC_SLASH_COUNT));
  SolAccountInfo *ka = p->ka;
  SlashAccounts a = {&ka[ACC_SLASH_REPORTER],     &ka[ACC_SLASH_TREASURY],      &ka[ACC_SLASH_STAKE],
                     &ka[ACC_SLASH_RUN],          &ka[ACC_SLASH_AUTHORIZATION], &ka[ACC_SLASH_JOINER],
                     &ka[ACC_SLASH_STAKE_VAULT],  &ka[ACC_SLASH_VAULT],         &ka[ACC_SLASH_MINT],
                     &ka[ACC_SLASH_TOKEN_PROGRAM], &ka[ACC_SLASH_COORDINATOR_PROGRAM], &ka[ACC_SLASH_SYSTEM_PROGRAM]};
  TRY(check_signer(a.reporter));
  TRY(check_writable(a.reporter));
  for (int i = 0; i < 6; i++)
    if (args->_pad[i] != 0) return ERR_INVALID_INSTRUCTION_DATA;
  Treasury *t;
  Stake *s;
  TRY(load_treasury(p, a.treasury, true, &t));
  TRY(load_stake(p, a.stake, a.treasury, &s));
  if (s->state == STAKE_STATE_SLASHED) return ERR_WRONG_STAKE_STATE;
  Joiner j = {p, a.treasury, t, a.run, a.authorization, a.joiner, a.coordinator_program, a.system_program};
  TRY(check_joiner(&j));
  TRY(check_token_accounts(t, a.vault, a.mint, a.token_program));
  if (!sol_pubkey_eq(a.stake_vault->key, &t->stake_vault)) return ERR_WRONG_VAULT;
  const SolPubkey *authority;
  TRY(load_run(a.run, &t->coordinator, &authority));
  TRY(check_convicted(a.run, args->index, &s->wallet));
  uint64_t slashed;
  if (!sol_add_u64(t->slashed, s->amount, &slashed)) return ERR_ARITHMETIC_OVERFLOW;

  TreasurySigner signer;
  treasury_signer(t, &signer);
  if (s->amount > 0) {
    TokenTransfer to_pool = {a.token_program, a.stake_vault, a.mint, a.vault, a.treasury};
    TRY(token_transfer_checked(&to_pool, s->amount, t->decimals, &signer.signer));
  }
  if (a.authorization->data_len != 0) { /* still granted (an Unstaking wallet gave it up already) */
    if (a.authorization->data_len != TREAS_COORD_JOIN_AUTHORIZATION_SIZE ||
        !sol_pubkey_eq((const SolPubkey *)(a.authorization->data + TREAS_COORD_JOIN_AUTHORIZATION_GRANTEE_OFFSET), &s->wallet))
      return ERR_WRONG_PDA;
    TRY(joiner_revoke(&j, a.reporter));
  }
  Slashed event = {*a.treasury->key, s->wallet, *a.reporter->key, s->amount};
  emit(EVENT_SLASHED, &event, sizeof(event));
  t->slashed = slashed;
  t->staked -= s->amount; /* every live stake's amount was added to it */
  s->amount = 0;
  s->state = STAKE_STATE_SLASHED;
  return SUCCESS;
}
