/* Witnesses: the seated clients that attest, each round, which results of the previous step they hold (a
   participants bitmap and the sha256 of their results list), and the votes that end an epoch. */
#include "internal.h"

static uint64_t find_record(const Witness *records, uint64_t len, uint16_t index) {
  for (uint64_t w = 0; w < len; w++)
    if (records[w].index == index) return w;
  return NOT_FOUND;
}

/* Store a record (a new one, or a witness's replacement of its own). No record feeds a seed: the seed a
   decision fixes was frozen when its round began, so a witness cannot grind its record for a seat. */
static void record_witness(Run *run, uint64_t at, const Witness *witness) {
  Round *round = current_round(run);
  Witness *records = current_records(run);
  records[at] = *witness;
  if (at == round->witnesses_len) round->witnesses_len++;
  coord_set_bit(round->witnessed_mask, witness->index);
}

/* Warmup: a member says it has loaded the model. Once witness_nodes members did, training starts early.
   The index must be the sender's own (Psyche accepted any index, so one client could fake them all). */
uint64_t coord_warmup_witness(Run *run, const CoordEnv *env, const SolPubkey *signer, uint16_t index) {
  if (run->run_state != RUN_STATE_WARMUP) return ERR_INVALID_RUN_STATE;
  if (run->seed_pending) return ERR_SEED_PENDING; /* the first round's inputs are frozen */
  const Client *c = index < run->epoch.clients_len ? &run->clients[index] : NULL;
  if (c == NULL || c->state != CLIENT_STATE_HEALTHY || !sol_pubkey_eq(&c->signer, signer)) return ERR_INVALID_WITNESS;
  Round *round = current_round(run);
  if (find_record(current_records(run), round->witnesses_len, index) != NOT_FOUND) return ERR_DUPLICATE_WITNESS;
  if (round->witnesses_len >= COORD_MAX_WITNESSES) return ERR_WITNESSES_FULL;
  Witness witness = {0};
  witness.index = index;
  witness.position = index;
  record_witness(run, round->witnesses_len, &witness);
  if (round->witnesses_len >= run->config.witness_nodes) freeze_round_inputs(run, env);
  else tick_opportunistically(run, env);
  return SUCCESS;
}

/* The seats are fixed when the round starts: those of the first witness_nodes positions whose client was
   healthy then (and not a persistent dissenter; dissents only move when a round ends). A member lost
   during the round (exited_height is this round's) keeps its seat, empty: no seat passes down mid-round,
   so a member cannot hand its seat on by getting itself dropped or convicted. */
uint64_t coord_witness_seat(const Run *run, uint16_t index) {
  const Round *round = coord_current_round(run);
  uint16_t order[COORD_MAX_CLIENTS];
  uint64_t n = coord_witness_order(round, order), seats = 0;
  for (uint64_t p = 0; p < n && seats < run->config.witness_nodes; p++) {
    uint16_t c = order[p];
    const Client *client = &run->clients[c];
    bool at_start = client->state == CLIENT_STATE_HEALTHY || client->exited_height == round->height;
    if (!at_start || client->dissents >= COORD_DISSENT_LIMIT) continue;
    if (c == index) return p;
    seats++;
  }
  return NOT_FOUND;
}

/* A record votes for a results root together with its participants bitmap: the list the root hashes names
   exactly those trainers, so honest seats with one root hold one bitmap, and a seat cannot vote the
   decided root while leaving one of its trainers out (health follows the decided set). */
bool coord_same_vote(const Witness *a, const Witness *b) {
  return sol_memcmp(a->results_root, b->results_root, 32) == 0 &&
         sol_memcmp(a->participants, b->participants, COORD_PARTICIPANT_BITMAP_LEN) == 0;
}

/* How many records vote as `ballot` does (or, with roots == false, report its weights digest). The record
   of a convicted member counts for nothing: its seat is empty. */
static uint64_t votes_for(const Run *run, const Witness *records, uint64_t len, const Witness *ballot, bool roots) {
  uint64_t votes = 0;
  for (uint64_t w = 0; w < len; w++) {
    if (run->clients[records[w].index].state == CLIENT_STATE_CONVICTED) continue;
    votes += roots ? coord_same_vote(&records[w], ballot) : records[w].weights_digest == ballot->weights_digest;
  }
  return votes;
}

/* The decided set is the work delivered: each trainer it names, among those the attested round gave a
   batch, delivered a round (points and proven shares follow at the epoch's end). An epoch's first round
   attests the step before the epoch, which none of its members trained (its indices are another epoch's). */
static void credit_delivered(Run *run, const uint8_t *participants) {
  const Round *round = coord_current_round(run);
  const Round *trained = coord_round_back(run, 1);
  if (round->height == 0 || trained == NULL) return;
  run->epoch.decided_rounds++;
  for (uint64_t b = 0; b < COORD_PARTICIPANT_BITMAP_LEN; b++) {
    uint32_t bits = participants[b] & trained->active_mask[b]; /* active bits are the epoch's clients only */
    if (bits == 0) continue;
    Client *c = &run->clients[8 * b];
    for (uint64_t k = 0; k < 8; k++) c[k].delivered += (bits >> k) & 1; /* branch-free: unrolled */
  }
}

/* A strict majority of seats agrees on a results root: the step's applied set is fixed. Witnesses whose
   root lost count a dissent (persistent dissenters lose their seats), and the round ends now. */
static void decide(Run *run, const CoordEnv *env, const Witness *ballot, uint64_t votes) {
  Round *round = current_round(run);
  const Witness *records = current_records(run);
  round->decided = true;
  round->decided_votes = (uint16_t)votes;
  sol_memcpy(round->decided_root, ballot->results_root, 32);
  credit_delivered(run, ballot->participants);
  bool dissent = false;
  for (uint64_t w = 0; w < round->witnesses_len; w++) {
    if (coord_same_vote(&records[w], ballot)) continue;
    Client *c = &run->clients[records[w].index];
    if (c->dissents < 255) c->dissents++;
    dissent = true;
  }
  if (dissent) members_changed(run);
  StepDecided event = {0};
  event.run = *env->run_key;
  event.step = run->progress.step - 1;
  event.votes = (uint16_t)votes;
  sol_memcpy(event.results_root, ballot->results_root, 32);
  coord_emit(EVENT_STEP_DECIDED, &event, sizeof(event));
  if (run->run_state == RUN_STATE_ROUND_TRAIN) change_state(run, env, RUN_STATE_ROUND_WITNESS);
  end_round(run, env);
}

/* RoundTrain / RoundWitness: a seated witness submits, or replaces, its record of the previous step's
   results. It names the step it is in, so a stale witness never counts for another round. The first
   results root a strict majority of the seats holds is the step's applied set, the same on every replica
   by construction; until then a witness may replace its record (it holds more now, or learned that a
   trainer equivocated), so honest witnesses converge. Nothing is accepted once the witness time is over. */
uint64_t coord_witness(Run *run, const CoordEnv *env, const SolPubkey *signer, const WitnessArgs *args) {
  if (run->run_state != RUN_STATE_ROUND_TRAIN && run->run_state != RUN_STATE_ROUND_WITNESS) return ERR_INVALID_RUN_STATE;
  if (run->seed_pending) return ERR_SEED_PENDING;
  if (run->run_state == RUN_STATE_ROUND_WITNESS && phase_over(run, env, run->config.round_witness_time)) return ERR_ROUND_OVER;
  if (args->step != run->progress.step) return ERR_WRONG_STEP;
  Round *round = current_round(run);
  uint16_t index = args->index;
  const Client *c = index < run->epoch.clients_len ? &run->clients[index] : NULL;
  if (c == NULL || c->state != CLIENT_STATE_HEALTHY || !sol_pubkey_eq(&c->signer, signer)) return ERR_INVALID_WITNESS;
  uint64_t seat = coord_witness_seat(run, index);
  if (seat == NOT_FOUND || seat != args->position) return ERR_INVALID_WITNESS;
  Witness witness = {0};
  witness.index = index;
  witness.position = args->position;
  sol_memcpy(witness.participants, args->participants, COORD_PARTICIPANT_BITMAP_LEN);
  sol_memcpy(witness.results_root, args->results_root, 32);
  witness.weights_digest = args->weights_digest;
  Witness *records = current_records(run);
  uint64_t at = find_record(records, round->witnesses_len, index);
  if (at != NOT_FOUND && sol_memcmp(&records[at], &witness, sizeof(Witness)) == 0) return ERR_DUPLICATE_WITNESS;
  if (at == NOT_FOUND) {
    if (round->witnesses_len >= run->config.witness_nodes) return ERR_WITNESSES_FULL;
    at = round->witnesses_len;
  }
  record_witness(run, at, &witness);

  WitnessSubmitted event = {0};
  event.run = *env->run_key;
  event.signer = *signer;
  event.step = args->step;
  event.index = index;
  event.position = args->position;
  sol_memcpy(event.results_root, args->results_root, 32);
  event.weights_digest = args->weights_digest;
  event.metadata = args->metadata;
  coord_emit(EVENT_WITNESS_SUBMITTED, &event, sizeof(event));

  uint64_t quorum = coord_witness_quorum(run->config.witness_nodes);
  round->digest_votes = 0; /* the weights digest a strict majority reports, if one does (replicas compare) */
  for (uint64_t w = 0; w < round->witnesses_len && round->digest_votes == 0; w++) {
    uint64_t digests = votes_for(run, records, round->witnesses_len, &records[w], false);
    if (digests >= quorum) {
      round->weights_digest = records[w].weights_digest;
      round->digest_votes = (uint16_t)digests;
    }
  }
  if (round->digest_votes == 0) round->weights_digest = 0;
  uint64_t votes = votes_for(run, records, round->witnesses_len, &witness, true);
  if (votes >= quorum) decide(run, env, &witness, votes);
  else tick_opportunistically(run, env);
  return SUCCESS;
}

/* Move the checkpoint's location: only the authority's designated checkpointers may (Psyche let any member
   point every joiner at any repo), and only where the weights are kept besides peers (kind, repo,
   revision). The weights' hash and step stay what the finishers' majority voted (vote_weights). A P2P
   pointer stays P2P and only its fallback repo changes. */
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
  candidate.checkpoint.step = run->model.checkpoint.step;
  sol_memcpy(candidate.checkpoint.weights_sha256, run->model.checkpoint.weights_sha256, 32);
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

/* From Cooldown until the next epoch starts, each healthy finisher reports the manifest hash of its
   epoch-end checkpoint. The hash a strict majority of them reported becomes the checkpoint's, the one
   joiners load and drifted replicas reload: a replica follows the majority, never one outlier (Psyche's
   pointer was whatever the last writer said). */
uint64_t coord_vote_weights(Run *run, const CoordEnv *env, const SolPubkey *signer, const VoteWeightsArgs *args) {
  if (run->run_state != RUN_STATE_COOLDOWN && run->run_state != RUN_STATE_WAITING_FOR_MEMBERS) return ERR_VOTE_CLOSED;
  if (args->_pad != 0) return ERR_NON_CANONICAL;
  if (args->step != run->progress.step) return ERR_WRONG_STEP;
  Client *c = args->index < run->epoch.clients_len ? &run->clients[args->index] : NULL;
  if (c == NULL || c->state != CLIENT_STATE_HEALTHY || !sol_pubkey_eq(&c->signer, signer)) return ERR_NOT_IN_EPOCH;
  if (bytes_are_zero(args->manifest, 32)) return ERR_INVALID_CHECKPOINT;
  if (sol_memcmp(c->weights_vote, args->manifest, 32) == 0) return ERR_NO_CHANGE;
  sol_memcpy(c->weights_vote, args->manifest, 32);
  uint64_t votes = 0;
  for (uint64_t i = 0; i < run->epoch.clients_len; i++)
    votes += run->clients[i].state == CLIENT_STATE_HEALTHY && sol_memcmp(run->clients[i].weights_vote, args->manifest, 32) == 0;
  Checkpoint *ck = &run->model.checkpoint;
  bool settled = ck->step == args->step && sol_memcmp(ck->weights_sha256, args->manifest, 32) == 0;
  if (2 * votes > healthy_count(run) && !settled) {
    ck->step = args->step;
    sol_memcpy(ck->weights_sha256, args->manifest, 32);
    CheckpointUpdated event = {*env->run_key, *ck};
    coord_emit(EVENT_CHECKPOINT_UPDATED, &event, sizeof(event));
  }
  tick_opportunistically(run, env);
  return SUCCESS;
}
