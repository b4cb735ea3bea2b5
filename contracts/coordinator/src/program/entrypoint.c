/* The coordinator program: decode the instruction, check its accounts, run the core, bump the nonce.
   Every rule about runs lives in ../core; this file only knows Solana. */
#include <sol/anchor_idl.h>

#include "accounts.h"
#include "generated/ix_accounts.h"
#include "endpoint.h"
#include "pda.h"
#include "points.h"
#include "proofs.h"

#define MAX_ACCOUNTS 7

/* What Anchor's IDL instructions refuse, in this program's error codes. */
static const SolAnchorIdlErrors IDL_ERRORS = SOL_ANCHOR_IDL_ERRORS;

static uint64_t need_accounts(const SolParameters *p, uint64_t n) {
  return p->ka_num >= n ? SUCCESS : ERR_MISSING_ACCOUNTS;
}

/* Log the rule a validation failed on, then pass the error through. */
static uint64_t explain(uint64_t status, const char *why) {
  if (status != SUCCESS && why) sol_log(why);
  return status;
}

/* A successful change of the Run: clients drop stale websocket notifications by this number. */
static uint64_t changed(Run *run, uint64_t status) {
  if (status == SUCCESS) run->nonce++;
  return status;
}

/* ---- instructions signed by the run's authority: [authority, run, (slot_hashes)] */

static uint64_t load_as_authority(SolParameters *p, Run **run) {
  TRY(need_accounts(p, 2));
  TRY(check_signer(&p->ka[0]));
  TRY(load_run(p, &p->ka[1], true, run));
  return sol_pubkey_eq(p->ka[0].key, &(*run)->authority) ? SUCCESS : ERR_UNAUTHORIZED;
}

static CoordEnv env_without_randomness(const SolAccountInfo *run_account) {
  CoordEnv env = {0};
  SolClock clock;
  if (sol_get_clock_sysvar(&clock) == SUCCESS) env.now = clock.unix_timestamp;
  env.run_key = run_account->key;
  return env;
}

__attribute__((noinline)) static uint64_t update_metadata(SolParameters *p) {
  Run *run;
  const UpdateMetadataArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_authority(p, &run));
  CoordEnv env = env_without_randomness(&p->ka[1]);
  const char *why = NULL;
  return changed(run, explain(coord_update_metadata(run, &env, &args->metadata, &why), why));
}

__attribute__((noinline)) static uint64_t update_config(SolParameters *p) {
  Run *run;
  const UpdateConfigArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_authority(p, &run));
  CoordEnv env = env_without_randomness(&p->ka[1]);
  const char *why = NULL;
  return changed(run, explain(coord_update_config(run, &env, &args->config, &args->progress, &why), why));
}

__attribute__((noinline)) static uint64_t update_model(SolParameters *p) {
  Run *run;
  const UpdateModelArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_authority(p, &run));
  CoordEnv env = env_without_randomness(&p->ka[1]);
  const char *why = NULL;
  return changed(run, explain(coord_update_model(run, &env, &args->model, &why), why));
}

__attribute__((noinline)) static uint64_t set_checkpointers(SolParameters *p) {
  Run *run;
  const SetCheckpointersArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_authority(p, &run));
  CoordEnv env = env_without_randomness(&p->ka[1]);
  return changed(run, coord_set_checkpointers(run, &env, args->checkpointers));
}

__attribute__((noinline)) static uint64_t set_paused(SolParameters *p) {
  Run *run;
  const SetPausedArgs *args;
  CoordEnv env;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  if (args->paused > 1) return ERR_INVALID_INSTRUCTION_DATA;
  TRY(load_as_authority(p, &run));
  TRY(need_accounts(p, 3));
  TRY(load_env(&p->ka[2], &p->ka[1], &env));
  const char *why = NULL;
  return changed(run, explain(coord_set_paused(run, &env, args->paused, &why), why));
}

/* ---- instructions any client signs: [user, run, slot_hashes] */

static uint64_t load_as_client(SolParameters *p, uint64_t slot_hashes_at, Run **run, CoordEnv *env) {
  TRY(need_accounts(p, slot_hashes_at + 1));
  TRY(check_signer(&p->ka[0]));
  TRY(load_run(p, &p->ka[1], true, run));
  return load_env(&p->ka[slot_hashes_at], &p->ka[1], env);
}

__attribute__((noinline)) static uint64_t tick(SolParameters *p) {
  Run *run;
  CoordEnv env;
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA; /* no arguments */
  TRY(load_as_client(p, 2, &run, &env));
  return changed(run, coord_tick(run, &env));
}

/* [user, run, slot_hashes, points, system program, endpoint]: the wallet's unclaimed points go to its
   Points account, its Endpoint account is closed. */
__attribute__((noinline)) static uint64_t exit_run(SolParameters *p) {
  Run *run;
  CoordEnv env;
  uint64_t points = 0;
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  TRY(load_as_client(p, 2, &run, &env));
  TRY(need_accounts(p, 6));
  TRY(check_points_accounts(p, 3, p->ka[0].key));
  TRY(changed(run, coord_exit(run, &env, p->ka[0].key, &points)));
  TRY(credit_points(p, 3, p->ka[0].key, points));
  return close_endpoint(p, 5);
}

/* [user, run, points, system program] */
__attribute__((noinline)) static uint64_t claim_points(SolParameters *p) {
  Run *run;
  uint64_t points = 0;
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  TRY(need_accounts(p, 4));
  TRY(check_signer(&p->ka[0]));
  TRY(load_run(p, &p->ka[1], true, &run));
  TRY(check_points_accounts(p, 2, p->ka[0].key));
  TRY(changed(run, coord_claim_points(run, p->ka[0].key, &points)));
  return credit_points(p, 2, p->ka[0].key, points);
}

/* [payer, run, points, system program]: anyone moves a wallet's unclaimed points into its Points account
   (paying the rent if it is new), so entries holding points cannot lock the registry or be lost. */
__attribute__((noinline)) static uint64_t settle_points(SolParameters *p) {
  Run *run;
  const SettlePointsArgs *args;
  uint64_t points = 0;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(need_accounts(p, 4));
  TRY(check_signer(&p->ka[0]));
  TRY(load_run(p, &p->ka[1], true, &run));
  TRY(check_points_accounts(p, 2, &args->wallet));
  TRY(changed(run, coord_settle_points(run, &args->wallet, &points)));
  return credit_points(p, 2, &args->wallet, points);
}

/* Whether an account that held a Run no longer does (closed: emptied, or reassigned). */
static bool run_closed(const SolParameters *p, const SolAccountInfo *a) {
  return !sol_pubkey_eq(a->owner, p->program_id) || a->data_len < DISCRIMINATOR_LEN || sol_get_u64(a->data) != ACCOUNT_RUN;
}

/* [wallet, points, run]: once its run is closed a wallet may close its Points account and get the rent. */
__attribute__((noinline)) static uint64_t close_points(SolParameters *p) {
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  TRY(need_accounts(p, ACC_CLOSE_POINTS_COUNT));
  SolAccountInfo *wallet = &p->ka[ACC_CLOSE_POINTS_WALLET], *account = &p->ka[ACC_CLOSE_POINTS_POINTS];
  TRY(check_signer(wallet));
  TRY(check_program_account(p, account, ACCOUNT_POINTS, POINTS_ACCOUNT_SIZE, true));
  const Points *points = (const Points *)(account->data + DISCRIMINATOR_LEN);
  if (!sol_pubkey_eq(&points->wallet, wallet->key) || !sol_pubkey_eq(&points->run, p->ka[ACC_CLOSE_POINTS_RUN].key)) return ERR_WRONG_PDA;
  if (!run_closed(p, &p->ka[ACC_CLOSE_POINTS_RUN])) return ERR_RUN_STILL_OPEN;
  return close_account(account, wallet);
}

/* [wallet, endpoint, run]: an Endpoint its wallet did not close with exit_run (the run was closed, or
   pruned the wallet's registry entry) is closed by its wallet, which gets the rent. */
__attribute__((noinline)) static uint64_t close_endpoint_ix(SolParameters *p) {
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  TRY(need_accounts(p, 3));
  TRY(check_signer(&p->ka[0]));
  return close_stale_endpoint(p, run_closed(p, &p->ka[2]));
}

/* An Authorized run admits a wallet that holds an allowing JoinAuthorization for this run. */
static uint64_t check_join_authorization(const SolParameters *p, const Run *run) {
  if (run->config.join_policy != JOIN_POLICY_AUTHORIZED) return SUCCESS;
  const SolAccountInfo *a = &p->ka[2];
  if (check_program_account(p, a, ACCOUNT_JOIN_AUTHORIZATION, JOIN_AUTHORIZATION_ACCOUNT_SIZE, false) != SUCCESS)
    return ERR_JOIN_NOT_AUTHORIZED;
  const JoinAuthorization *auth = (const JoinAuthorization *)(a->data + DISCRIMINATOR_LEN);
  bool valid = auth->allowed && sol_pubkey_eq(&auth->run, p->ka[1].key) && sol_pubkey_eq(&auth->grantee, p->ka[0].key);
  return valid ? SUCCESS : ERR_JOIN_NOT_AUTHORIZED;
}

/* [user, run, authorization, slot_hashes, instructions sysvar, endpoint, system program]: the node key's
   proof is read from the instructions sysvar; the address goes to the wallet's Endpoint account. */
__attribute__((noinline)) static uint64_t join_run(SolParameters *p) {
  Run *run;
  CoordEnv env;
  const JoinRunArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_client(p, 3, &run, &env));
  TRY(check_join_authorization(p, run));
  TRY(need_accounts(p, 7));
  uint64_t join_marker = run->next_active;
  TRY(check_node_key_proof(&p->ka[4], p->ka[1].key, p->ka[0].key, &args->p2p_identity, join_marker));
  uint64_t status = coord_join(run, &env, p->ka[0].key, args);
  /* already pending with this node: a restarted client's new address still reaches its peers */
  if (status == ERR_ALREADY_JOINED && endpoint_differs(p, 5, args)) return write_endpoint(p, 5, args, join_marker);
  TRY(changed(run, status));
  return write_endpoint(p, 5, args, join_marker);
}

__attribute__((noinline)) static uint64_t warmup_witness(SolParameters *p) {
  Run *run;
  CoordEnv env;
  const WarmupWitnessArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_client(p, 2, &run, &env));
  return changed(run, coord_warmup_witness(run, &env, p->ka[0].key, args->index));
}

__attribute__((noinline)) static uint64_t witness(SolParameters *p) {
  Run *run;
  CoordEnv env;
  const WitnessArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_client(p, 2, &run, &env));
  return changed(run, coord_witness(run, &env, p->ka[0].key, args));
}

__attribute__((noinline)) static uint64_t health_check(SolParameters *p) {
  Run *run;
  CoordEnv env;
  const HealthCheckArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_client(p, 2, &run, &env));
  return changed(run, coord_health_check(run, &env, p->ka[0].key, args));
}

__attribute__((noinline)) static uint64_t checkpoint(SolParameters *p) {
  Run *run;
  CoordEnv env;
  const CheckpointArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_client(p, 2, &run, &env));
  return changed(run, coord_checkpoint(run, &env, p->ka[0].key, &args->checkpoint));
}

__attribute__((noinline)) static uint64_t vote_weights(SolParameters *p) {
  Run *run;
  CoordEnv env;
  const VoteWeightsArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_client(p, 2, &run, &env));
  return changed(run, coord_vote_weights(run, &env, p->ka[0].key, args));
}

/* [user, run, slot_hashes, instructions sysvar]: two earlier Ed25519 instructions hold the accused's node
   key signatures over two result statements of one step of this epoch (its number, which never repeats)
   with different commitments. */
__attribute__((noinline)) static uint64_t report_equivocation(SolParameters *p) {
  Run *run;
  CoordEnv env;
  const ReportEquivocationArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_client(p, 2, &run, &env));
  TRY(need_accounts(p, 4));
  if (args->_pad != 0) return ERR_NON_CANONICAL;
  if (args->index >= run->epoch.clients_len) return ERR_NOT_IN_EPOCH;
  if (args->step < run->epoch.start_step || args->step > run->progress.step) return ERR_WRONG_STEP;
  if (sol_memcmp(args->first.commitment, args->second.commitment, 32) == 0) return ERR_EQUIVOCATION_NOT_PROVEN;
  const SolPubkey *node = &run->clients[args->index].p2p_identity;
  StatementWhen when = {run->epoch.epoch, args->step};
  TRY(check_result_statement(&p->ka[3], p->ka[1].key, node, &when, &args->first));
  TRY(check_result_statement(&p->ka[3], p->ka[1].key, node, &when, &args->second));
  Conviction conviction = {args->index, CONVICTION_REASON_EQUIVOCATION, args->step, 0};
  return changed(run, coord_convict(run, &env, &conviction));
}

/* [user, run, slot_hashes]: the plan, the window of seeds and the tallies are the core's. */
__attribute__((noinline)) static uint64_t report_check(SolParameters *p) {
  Run *run;
  CoordEnv env;
  const ReportCheckArgs *args;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(load_as_client(p, 2, &run, &env));
  return changed(run, coord_report_check(run, &env, p->ka[0].key, args));
}

/* ---- creation and removal */

static const char RUN_SEED[] = "run";
static const char JOIN_SEED[] = "join";

/* Length of a NUL-padded run id: 1..32 bytes, nothing after the first NUL. */
static uint64_t run_id_length(const uint8_t *run_id, uint64_t *len) {
  uint64_t n = 0;
  while (n < COORD_RUN_ID_LEN && run_id[n]) n++;
  for (uint64_t i = n; i < COORD_RUN_ID_LEN; i++)
    if (run_id[i]) return ERR_RUN_ID_INVALID;
  *len = n;
  return n == 0 ? ERR_RUN_ID_INVALID : SUCCESS;
}

/* [payer, authority, run (created by the caller, zeroed, owned by us), run_index PDA, system program] */
__attribute__((noinline)) static uint64_t initialize_run(SolParameters *p) {
  const InitializeRunArgs *args;
  uint64_t id_len;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  TRY(run_id_length(args->run_id, &id_len));
  TRY(need_accounts(p, ACC_INITIALIZE_RUN_COUNT));
  SolAccountInfo *payer = &p->ka[ACC_INITIALIZE_RUN_PAYER], *authority = &p->ka[ACC_INITIALIZE_RUN_AUTHORITY],
                 *run_account = &p->ka[ACC_INITIALIZE_RUN_RUN], *index = &p->ka[ACC_INITIALIZE_RUN_RUN_INDEX];
  TRY(check_signer(payer));
  TRY(check_signer(authority));
  if (!sol_pubkey_eq(run_account->owner, p->program_id)) return ERR_WRONG_ACCOUNT_OWNER;
  if (run_account->data_len != RUN_ACCOUNT_SIZE) return ERR_WRONG_ACCOUNT_SIZE;
  if (!run_account->is_writable || !index->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  if (sol_get_u64(run_account->data) != 0) return ERR_ALREADY_INITIALIZED;
  if (sol_pubkey_eq(run_account->key, index->key)) return ERR_DUPLICATE_ACCOUNT;
  if (!sol_is_system_program(p->ka[ACC_INITIALIZE_RUN_SYSTEM_PROGRAM].key)) return ERR_WRONG_PROGRAM;

  SolSignerSeed seeds[3] = {{(const uint8_t *)RUN_SEED, sizeof(RUN_SEED) - 1}, {args->run_id, id_len}};
  uint8_t bump;
  NewAccount new_index = {p, payer, index, &p->ka[ACC_INITIALIZE_RUN_SYSTEM_PROGRAM]};
  TRY(create_pda_at(&new_index, seeds, 2, RUN_INDEX_ACCOUNT_SIZE, &bump));

  sol_put_u64(index->data, ACCOUNT_RUN_INDEX);
  RunIndex *run_index = (RunIndex *)(index->data + DISCRIMINATOR_LEN);
  run_index->bump = bump;
  sol_memcpy(run_index->run_id, args->run_id, COORD_RUN_ID_LEN);
  run_index->run = *run_account->key;
  run_index->authority = *authority->key;

  sol_put_u64(run_account->data, ACCOUNT_RUN);
  Run *run = (Run *)(run_account->data + DISCRIMINATOR_LEN);
  return changed(run, coord_init(run, args->run_id, authority->key, &args->join_authority));
}

/* [join_authority (pays), run, authorization PDA ["join", run, grantee], system program]. Revoking also
   withdraws the grantee's pending join, which would otherwise still enter the next epoch. */
__attribute__((noinline)) static uint64_t set_join_authorization(SolParameters *p) {
  const SetJoinAuthorizationArgs *args;
  Run *run;
  TRY(args_of(p, sizeof(*args), (const void **)&args));
  if (args->allowed > 1) return ERR_INVALID_INSTRUCTION_DATA;
  TRY(need_accounts(p, ACC_SET_JOIN_AUTHORIZATION_COUNT));
  SolAccountInfo *grantor = &p->ka[ACC_SET_JOIN_AUTHORIZATION_JOIN_AUTHORITY];
  SolAccountInfo *auth_account = &p->ka[ACC_SET_JOIN_AUTHORIZATION_AUTHORIZATION];
  TRY(check_signer(grantor));
  TRY(load_run(p, &p->ka[ACC_SET_JOIN_AUTHORIZATION_RUN], true, &run));
  if (!sol_pubkey_eq(grantor->key, &run->join_authority)) return ERR_UNAUTHORIZED;
  if (!auth_account->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  if (!sol_is_system_program(p->ka[ACC_SET_JOIN_AUTHORIZATION_SYSTEM_PROGRAM].key)) return ERR_WRONG_PROGRAM;
  bool existed = auth_account->data_len != 0;
  if (!existed) {
    if (!args->allowed) return ERR_NO_CHANGE; /* nothing granted, nothing to revoke */
    SolSignerSeed seeds[4] = {{(const uint8_t *)JOIN_SEED, sizeof(JOIN_SEED) - 1},
                              {p->ka[ACC_SET_JOIN_AUTHORIZATION_RUN].key->x, SIZE_PUBKEY},
                              {args->grantee.x, SIZE_PUBKEY}};
    uint8_t bump;
    NewAccount new_auth = {p, grantor, auth_account, &p->ka[ACC_SET_JOIN_AUTHORIZATION_SYSTEM_PROGRAM]};
    TRY(create_pda_at(&new_auth, seeds, 3, JOIN_AUTHORIZATION_ACCOUNT_SIZE, &bump));
    sol_put_u64(auth_account->data, ACCOUNT_JOIN_AUTHORIZATION);
    JoinAuthorization *auth = (JoinAuthorization *)(auth_account->data + DISCRIMINATOR_LEN);
    auth->bump = bump;
    auth->run = *p->ka[ACC_SET_JOIN_AUTHORIZATION_RUN].key;
    auth->grantee = args->grantee;
    auth->join_authority = *grantor->key;
  } else {
    TRY(check_program_account(p, auth_account, ACCOUNT_JOIN_AUTHORIZATION, JOIN_AUTHORIZATION_ACCOUNT_SIZE, true));
  }
  JoinAuthorization *auth = (JoinAuthorization *)(auth_account->data + DISCRIMINATOR_LEN);
  if (!sol_pubkey_eq(&auth->run, p->ka[ACC_SET_JOIN_AUTHORIZATION_RUN].key) || !sol_pubkey_eq(&auth->grantee, &args->grantee)) return ERR_WRONG_PDA;
  if (existed && auth->allowed == args->allowed) return ERR_NO_CHANGE;
  auth->allowed = args->allowed;
  if (!args->allowed && coord_withdraw_pending_join(run, &args->grantee)) run->nonce++;
  return SUCCESS;
}

/* [join_authority (receives the rent), run, authorization]: the grant ends with its account, and the
   grantee's pending join with it. After the run was closed, the join authority that created the account
   (recorded in it) may still close it. */
__attribute__((noinline)) static uint64_t close_join_authorization(SolParameters *p) {
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  TRY(need_accounts(p, ACC_CLOSE_JOIN_AUTHORIZATION_COUNT));
  SolAccountInfo *grantor = &p->ka[ACC_CLOSE_JOIN_AUTHORIZATION_JOIN_AUTHORITY];
  SolAccountInfo *auth_account = &p->ka[ACC_CLOSE_JOIN_AUTHORIZATION_AUTHORIZATION];
  TRY(check_signer(grantor));
  TRY(check_program_account(p, auth_account, ACCOUNT_JOIN_AUTHORIZATION, JOIN_AUTHORIZATION_ACCOUNT_SIZE, true));
  const JoinAuthorization *auth = (const JoinAuthorization *)(auth_account->data + DISCRIMINATOR_LEN);
  if (!sol_pubkey_eq(&auth->run, p->ka[ACC_CLOSE_JOIN_AUTHORIZATION_RUN].key)) return ERR_WRONG_PDA;
  if (run_closed(p, &p->ka[ACC_CLOSE_JOIN_AUTHORIZATION_RUN])) {
    if (!sol_pubkey_eq(grantor->key, &auth->join_authority)) return ERR_UNAUTHORIZED;
    return close_account(auth_account, grantor);
  }
  Run *run;
  TRY(load_run(p, &p->ka[ACC_CLOSE_JOIN_AUTHORIZATION_RUN], true, &run));
  if (!sol_pubkey_eq(grantor->key, &run->join_authority)) return ERR_UNAUTHORIZED;
  if (coord_withdraw_pending_join(run, &auth->grantee)) run->nonce++;
  return close_account(auth_account, grantor);
}

/* [authority, run, run_index, recipient]: only while halted; both accounts' rent goes to the recipient. */
__attribute__((noinline)) static uint64_t close_run(SolParameters *p) {
  Run *run;
  if (p->data_len != DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION_DATA;
  TRY(load_as_authority(p, &run));
  TRY(need_accounts(p, ACC_CLOSE_RUN_COUNT));
  SolAccountInfo *run_account = &p->ka[ACC_CLOSE_RUN_RUN], *index = &p->ka[ACC_CLOSE_RUN_RUN_INDEX],
                 *recipient = &p->ka[ACC_CLOSE_RUN_RECIPIENT];
  TRY(check_program_account(p, index, ACCOUNT_RUN_INDEX, RUN_INDEX_ACCOUNT_SIZE, true));
  const RunIndex *run_index = (const RunIndex *)(index->data + DISCRIMINATOR_LEN);
  if (!sol_pubkey_eq(&run_index->run, run_account->key)) return ERR_WRONG_PDA;
  if (!recipient->is_writable) return ERR_ACCOUNT_NOT_WRITABLE;
  if (sol_pubkey_eq(recipient->key, run_account->key) || sol_pubkey_eq(recipient->key, index->key))
    return ERR_DUPLICATE_ACCOUNT;
  if (!coord_is_halted(run->run_state)) return ERR_NOT_HALTED;
  if (coord_points_unclaimed(run)) return ERR_POINTS_UNCLAIMED; /* settle_points them: nobody loses points */
  uint64_t total;
  if (!sol_add_u64(*run_account->lamports, *index->lamports, &total) || !sol_add_u64(*recipient->lamports, total, &total))
    return ERR_ARITHMETIC_OVERFLOW;
  *recipient->lamports = total;
  *run_account->lamports = 0;
  *index->lamports = 0;
  sol_memset(run_account->data, 0, run_account->data_len);
  sol_memset(index->data, 0, index->data_len);
  sol_account_set_data_len(run_account, 0);
  sol_account_set_data_len(index, 0);
  return SUCCESS;
}

uint64_t entrypoint(const uint8_t *input) {
  SolAccountInfo accounts[MAX_ACCOUNTS];
  SolParameters params = {.ka = accounts};
  sol_deserialize(input, &params, MAX_ACCOUNTS);
  if (params.data_len < DISCRIMINATOR_LEN) return ERR_INVALID_INSTRUCTION;
  switch (sol_get_u64(params.data)) {
    case IX_INITIALIZE_RUN: return initialize_run(&params);
    case IX_UPDATE_METADATA: return update_metadata(&params);
    case IX_UPDATE_CONFIG: return update_config(&params);
    case IX_UPDATE_MODEL: return update_model(&params);
    case IX_SET_CHECKPOINTERS: return set_checkpointers(&params);
    case IX_SET_PAUSED: return set_paused(&params);
    case IX_SET_JOIN_AUTHORIZATION: return set_join_authorization(&params);
    case IX_JOIN_RUN: return join_run(&params);
    case IX_EXIT_RUN: return exit_run(&params);
    case IX_CLAIM_POINTS: return claim_points(&params);
    case IX_SETTLE_POINTS: return settle_points(&params);
    case IX_CLOSE_POINTS: return close_points(&params);
    case IX_CLOSE_ENDPOINT: return close_endpoint_ix(&params);
    case IX_CLOSE_JOIN_AUTHORIZATION: return close_join_authorization(&params);
    case IX_TICK: return tick(&params);
    case IX_WARMUP_WITNESS: return warmup_witness(&params);
    case IX_WITNESS: return witness(&params);
    case IX_HEALTH_CHECK: return health_check(&params);
    case IX_CHECKPOINT: return checkpoint(&params);
    case IX_VOTE_WEIGHTS: return vote_weights(&params);
    case IX_REPORT_EQUIVOCATION: return report_equivocation(&params);
    case IX_REPORT_CHECK: return report_check(&params);
    case IX_CLOSE_RUN: return close_run(&params);
    case SOL_ANCHOR_IDL_IX_TAG: return sol_anchor_idl(&params, &IDL_ERRORS); /* so Anchor tooling finds the IDL */
    default: return ERR_INVALID_INSTRUCTION;
  }
}
