/* Witnesses: the elected clients that attest, each round, which results they received. */
#include "internal.h"

static bool already_witnessed(const Round *round, uint16_t index) {
  for (uint64_t w = 0; w < round->witnesses_len; w++)
    if (round->witnesses[w].index == index) return true;
  return false;
}

static void record_witness(Round *round, const Witness *witness) {
  round->witnesses[round->witnesses_len++] = *witness;
  SolBytes parts[2] = {{round->witness_digest, 32}, {(const uint8_t *)witness, sizeof(Witness)}};
  coord_sha256(parts, 2, round->witness_digest);
}

/* Warmup: a member says it has loaded the model. Once witness_nodes members did, training starts early.
   The index must be the sender's own (Psyche accepted any index, so one client could fake them all). */
uint64_t coord_warmup_witness(Run *run, const CoordEnv *env, const SolPubkey *signer, uint16_t index) {
  if (run->run_state != RUN_STATE_WARMUP) return ERR_INVALID_RUN_STATE;
  if (run->seed_pending) return ERR_SEED_PENDING; /* the first round's inputs are frozen */
  const Client *c = index < run->epoch.clients_len ? &run->epoch.clients[index] : NULL;
  if (c == NULL || c->state != CLIENT_STATE_HEALTHY || !sol_pubkey_eq(&c->signer, signer)) return ERR_INVALID_WITNESS;
  Round *round = current_round(run);
  if (already_witnessed(round, index)) return ERR_DUPLICATE_WITNESS;
  if (round->witnesses_len >= COORD_MAX_WITNESSES) return ERR_WITNESSES_FULL;
  Witness witness = {0};
  witness.index = index;
  witness.position = index;
  record_witness(round, &witness);
  if (round->witnesses_len >= run->config.witness_nodes) freeze_round_inputs(run, env);
  else tick_opportunistically(run, env);
  return SUCCESS;
}

uint64_t coord_witness_slots(const Run *run) {
  const Round *round = coord_current_round(run);
  uint64_t lost = 0;
  for (uint64_t i = 0; i < run->epoch.clients_len; i++)
    lost += coord_bit(round->active_mask, i) && run->epoch.clients[i].state != CLIENT_STATE_HEALTHY;
  return run->config.witness_nodes + lost;
}

/* RoundTrain / RoundWitness: an elected witness submits its proof. It names the step it attests, so a
   stale witness can never count for another round (Psyche relied on the shuffle not matching). Once the
   witness time is over nothing more is accepted: the round's inputs are about to freeze. */
uint64_t coord_witness(Run *run, const CoordEnv *env, const SolPubkey *signer, const WitnessArgs *args) {
  if (run->run_state != RUN_STATE_ROUND_TRAIN && run->run_state != RUN_STATE_ROUND_WITNESS) return ERR_INVALID_RUN_STATE;
  if (run->seed_pending) return ERR_SEED_PENDING;
  if (run->run_state == RUN_STATE_ROUND_WITNESS && phase_over(run, env, run->config.round_witness_time)) return ERR_ROUND_OVER;
  if (args->step != run->progress.step) return ERR_WRONG_STEP;
  Round *round = current_round(run);
  uint16_t index = args->index;
  const Client *c = index < run->epoch.clients_len ? &run->epoch.clients[index] : NULL;
  if (c == NULL || c->state != CLIENT_STATE_HEALTHY || !sol_pubkey_eq(&c->signer, signer)) return ERR_INVALID_WITNESS;
  uint64_t position = coord_witness_position(round, index);
  if (position != args->position) return ERR_INVALID_WITNESS;
  if (position >= run->config.witness_nodes && position >= coord_witness_slots(run)) return ERR_INVALID_WITNESS;
  if (already_witnessed(round, index)) return ERR_DUPLICATE_WITNESS;
  if (round->witnesses_len >= run->config.witness_nodes) return ERR_WITNESSES_FULL;
  Witness witness = {0};
  witness.index = index;
  witness.position = args->position;
  sol_memcpy(witness.participants, args->participants, COORD_PARTICIPANT_BITMAP_LEN);
  witness.bloom_salt = args->bloom_salt;
  sol_memcpy(witness.broadcast_bloom, args->broadcast_bloom, COORD_BLOOM_BYTES);
  record_witness(round, &witness);

  WitnessSubmitted event = {0};
  event.run = *env->run_key;
  event.signer = *signer;
  event.step = args->step;
  event.index = index;
  event.position = args->position;
  event.metadata = args->metadata;
  coord_emit(EVENT_WITNESS_SUBMITTED, &event, sizeof(event));

  if (round->witnesses_len >= run->config.witness_nodes) {
    /* Everyone elected has spoken: nothing is left to wait for, so the round ends in this instruction (its
       inputs freeze here; the next seed comes from this slot's hash, which this sender cannot know). */
    if (run->run_state == RUN_STATE_ROUND_TRAIN) change_state(run, env, RUN_STATE_ROUND_WITNESS);
    end_round(run, env);
  } else {
    tick_opportunistically(run, env);
  }
  return SUCCESS;
}

/* Move the checkpoint pointer. Only the authority's designated checkpointers may (Psyche let any member
   point every joiner at any repo). A P2P pointer stays P2P and only its fallback repo changes. */
uint64_t coord_checkpoint(Run *run, const CoordEnv *env, const SolPubkey *signer, const Checkpoint *checkpoint) {
  bool allowed = false;
  for (uint64_t i = 0; i < COORD_MAX_CHECKPOINTERS; i++)
    allowed |= !pubkey_is_zero(&run->checkpointers[i]) && sol_pubkey_eq(&run->checkpointers[i], signer);
  if (!allowed) return ERR_NOT_A_CHECKPOINTER;
  if (!bytes_are_zero(checkpoint->_pad, sizeof(checkpoint->_pad))) return ERR_NON_CANONICAL;
  if (checkpoint->kind != CHECKPOINT_KIND_HUB && checkpoint->kind != CHECKPOINT_KIND_GCS) return ERR_INVALID_CHECKPOINT;
  if (checkpoint->repo[0] == 0) return ERR_INVALID_CHECKPOINT;
  ModelConfig candidate = run->model;
  candidate.checkpoint = *checkpoint;
  uint8_t current = run->model.checkpoint.kind;
  bool peers = current == CHECKPOINT_KIND_P2P || current == CHECKPOINT_KIND_P2P_GCS;
  if (peers) candidate.checkpoint.kind = checkpoint->kind == CHECKPOINT_KIND_HUB ? CHECKPOINT_KIND_P2P : CHECKPOINT_KIND_P2P_GCS;
  const char *why;
  if (coord_check_model(&candidate, &why) != SUCCESS) return ERR_INVALID_CHECKPOINT;
  if (sol_memcmp(&candidate.checkpoint, &run->model.checkpoint, sizeof(Checkpoint)) == 0) return ERR_NO_CHANGE;
  run->model.checkpoint = candidate.checkpoint;
  CheckpointUpdated event = {*env->run_key, run->model.checkpoint};
  coord_emit(EVENT_CHECKPOINT_UPDATED, &event, sizeof(event));
  tick_opportunistically(run, env);
  return SUCCESS;
}
