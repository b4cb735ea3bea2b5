/* The run's configuration rules, quorum and batch-size ramp. */
#include "internal.h"

bool coord_is_halted(uint8_t run_state) {
  return run_state == RUN_STATE_UNINITIALIZED || run_state == RUN_STATE_FINISHED || run_state == RUN_STATE_PAUSED;
}

/* Quorum of a round's witnesses, always relative to the configured seats (never to the arrivals): a
   strict majority, so two different results roots can never both have one, and no minority of seats can
   decide a step or drop a trainer. */
uint16_t coord_witness_quorum(uint16_t witness_nodes) { return (uint16_t)(witness_nodes / 2 + 1); }

/* Global batch size (sequences) of a round starting at `data_index`: a linear ramp from start to end over
   the first global_batch_size_warmup_tokens tokens, then end. Psyche computes round(start + (end - start)
   * tokens / warmup) in f64; here it is exact rational arithmetic rounding halves up, the same except
   where f64 itself would round wrongly. */
uint32_t coord_batch_size(const RunConfig *config, const ModelConfig *model, uint64_t data_index) {
  uint64_t start = config->global_batch_size_start, end = config->global_batch_size_end;
  uint64_t warmup = config->global_batch_size_warmup_tokens;
  uint64_t tokens;
  if (warmup == 0 || end <= start || !sol_mul_u64(data_index, model->max_seq_len, &tokens) || tokens >= warmup)
    return (uint32_t)end;
  /* start + floor(((end - start) * tokens * 2 + warmup) / (2 * warmup)), tokens < warmup */
  uint64_t scaled;
  if (!sol_muldiv64((end - start) * 2, tokens, warmup, &scaled)) return (uint32_t)end;
  return (uint32_t)(start + (scaled + 1) / 2);
}

/* ---- validation */

#define FAIL(code, rule) \
  do {                   \
    if (why) *why = rule; \
    return code;          \
  } while (0)

/* A NUL-padded string field: bytes after the first NUL must all be NUL. Returns its length. */
static bool padded_string(const uint8_t *s, uint64_t capacity, uint64_t *len) {
  uint64_t n = 0;
  while (n < capacity && s[n]) n++;
  for (uint64_t i = n; i < capacity; i++)
    if (s[i]) return false;
  *len = n;
  return true;
}

/* f32 bits: finite and >= 0 (sign clear, exponent not all ones). */
static bool f32_finite_nonnegative(uint32_t bits) { return (bits >> 31) == 0 && ((bits >> 23) & 0xff) != 0xff; }
static bool f32_positive(uint32_t bits) { return f32_finite_nonnegative(bits) && bits != 0; }
#define F32_ONE 0x3f800000u

uint64_t coord_check_config(const RunConfig *c, const char **why) {
  if (c->epoch_time == 0) FAIL(ERR_CONFIG_INVALID, "epoch_time must be > 0");
  if (c->warmup_time >= c->epoch_time) FAIL(ERR_CONFIG_INVALID, "warmup_time must be < epoch_time");
  if (c->max_round_train_time == 0 || c->max_round_train_time >= c->epoch_time)
    FAIL(ERR_CONFIG_INVALID, "max_round_train_time must be > 0 and < epoch_time");
  if (c->round_witness_time == 0 || c->round_witness_time >= c->epoch_time)
    FAIL(ERR_CONFIG_INVALID, "round_witness_time must be > 0 and < epoch_time");
  if (c->cooldown_time == 0) FAIL(ERR_CONFIG_INVALID, "cooldown_time must be > 0");
  if (c->waiting_for_members_extra_time == 0) FAIL(ERR_CONFIG_INVALID, "waiting_for_members_extra_time must be > 0");
  if (c->min_clients == 0) FAIL(ERR_CONFIG_INVALID, "min_clients must be > 0");
  if (c->min_clients > c->init_min_clients || c->init_min_clients > COORD_MAX_CLIENTS)
    FAIL(ERR_CONFIG_INVALID, "min_clients <= init_min_clients <= 256 must hold");
  if (c->global_batch_size_start == 0 || c->global_batch_size_start > c->global_batch_size_end)
    FAIL(ERR_CONFIG_INVALID, "0 < global_batch_size_start <= global_batch_size_end must hold");
  if (c->init_min_clients > c->global_batch_size_start)
    FAIL(ERR_CONFIG_INVALID, "init_min_clients must be <= global_batch_size_start (every trainer needs data)");
  if (c->total_steps == 0) FAIL(ERR_CONFIG_INVALID, "total_steps must be > 0");
  if (c->witness_nodes == 0 || c->witness_nodes > COORD_MAX_WITNESSES || c->witness_nodes > c->init_min_clients)
    FAIL(ERR_CONFIG_INVALID, "witness_nodes must be > 0, <= 32 and <= init_min_clients (every seat filled at the start)");
  if (coord_witness_quorum(c->witness_nodes) > c->min_clients)
    FAIL(ERR_CONFIG_INVALID, "a strict majority of witness_nodes must be <= min_clients (else no step can be decided)");
  if (c->witness_nodes < 3 && c->init_min_clients >= 3)
    FAIL(ERR_CONFIG_INVALID, "witness_nodes must be >= 3 once init_min_clients >= 3 (with 2 seats one witness can block every step)");
  if (c->join_policy >= JOIN_POLICY_COUNT) FAIL(ERR_CONFIG_INVALID, "join_policy is not a known policy");
  if (c->max_share_ratio == 0 || c->max_share_ratio > 16) FAIL(ERR_CONFIG_INVALID, "max_share_ratio must be 1..16");
  if (c->verification_percent > 100) FAIL(ERR_CONFIG_INVALID, "verification_percent must be 0..100");
  if (c->pipeline_depth < 2 || c->pipeline_depth > 4) FAIL(ERR_CONFIG_INVALID, "pipeline_depth must be 2..4");
  /* at least one: a convicted wallet must not be back in the very next epoch (a ban of none costs nothing) */
  if (c->conviction_ban_epochs == 0 || c->conviction_ban_epochs > COORD_MAX_BAN_EPOCHS)
    FAIL(ERR_CONFIG_INVALID, "conviction_ban_epochs must be 1..MAX_BAN_EPOCHS (10000)");
  /* a rate every member can sustain (a home uplink serves tens of Mbit/s); below 16 KiB/s a check of a large
     state would take hours, and its step's weights would be long gone */
  if (c->check_rate_kib < 16) FAIL(ERR_CONFIG_INVALID, "check_rate_kib must be 16..65535 (KiB/s)");
  /* padding is zero: an argument has one encoding, and stored bytes are equal exactly when values are */
  if (!bytes_are_zero(c->_pad, sizeof(c->_pad))) FAIL(ERR_NON_CANONICAL, "padding bytes (_pad) must be zero");
  return SUCCESS;
}

uint64_t coord_check_model(const ModelConfig *m, const char **why) {
  uint64_t len;
  if (m->architecture >= ARCHITECTURE_COUNT) FAIL(ERR_MODEL_INVALID, "architecture is not known");
  if (m->data_type >= DATA_TYPE_COUNT) FAIL(ERR_MODEL_INVALID, "data_type is not known");
  if (m->max_seq_len == 0) FAIL(ERR_MODEL_INVALID, "max_seq_len must be > 0");
  /* padding is zero: an argument has one encoding, and stored bytes are equal exactly when values are */
  if (!bytes_are_zero(m->_pad, sizeof(m->_pad)) || !bytes_are_zero(m->checkpoint._pad, sizeof(m->checkpoint._pad)) ||
      !bytes_are_zero(m->lr_schedule._pad, sizeof(m->lr_schedule._pad)) ||
      !bytes_are_zero(m->optimizer._pad, sizeof(m->optimizer._pad)))
    FAIL(ERR_NON_CANONICAL, "padding bytes (_pad) must be zero");
  if (!padded_string(m->preset, COORD_PRESET_LEN, &len)) FAIL(ERR_MODEL_INVALID, "preset must be NUL-padded");
  if (!padded_string(m->data_location, COORD_URL_LEN, &len) || len == 0)
    FAIL(ERR_MODEL_INVALID, "data_location must be a non-empty NUL-padded string");
  const Checkpoint *ck = &m->checkpoint;
  if (ck->kind >= CHECKPOINT_KIND_COUNT) FAIL(ERR_MODEL_INVALID, "checkpoint.kind is not known");
  if (!padded_string(ck->repo, COORD_REPO_LEN, &len)) FAIL(ERR_MODEL_INVALID, "checkpoint.repo must be NUL-padded");
  if (ck->kind != CHECKPOINT_KIND_DUMMY && len == 0) FAIL(ERR_MODEL_INVALID, "checkpoint.repo must not be empty");
  if (!padded_string(ck->revision, COORD_REVISION_LEN, &len))
    FAIL(ERR_MODEL_INVALID, "checkpoint.revision must be NUL-padded");
  const LrSchedule *lr = &m->lr_schedule;
  if (lr->kind >= LR_SCHEDULE_KIND_COUNT) FAIL(ERR_MODEL_INVALID, "lr_schedule.kind is not known");
  if (!f32_positive(lr->base_lr)) FAIL(ERR_MODEL_INVALID, "lr_schedule.base_lr must be finite and > 0");
  if (!f32_finite_nonnegative(lr->final_lr)) FAIL(ERR_MODEL_INVALID, "lr_schedule.final_lr must be finite and >= 0");
  const DistroConfig *o = &m->optimizer;
  if (!f32_finite_nonnegative(o->compression_decay) || o->compression_decay >= F32_ONE)
    FAIL(ERR_MODEL_INVALID, "optimizer.compression_decay must be in [0, 1)");
  if (!f32_finite_nonnegative(o->clip_grad_norm)) FAIL(ERR_MODEL_INVALID, "optimizer.clip_grad_norm must be >= 0");
  if (!f32_finite_nonnegative(o->weight_decay)) FAIL(ERR_MODEL_INVALID, "optimizer.weight_decay must be >= 0");
  if (o->compression_chunk == 0) FAIL(ERR_MODEL_INVALID, "optimizer.compression_chunk must be > 0");
  if (o->compression_topk == 0 || (uint64_t)o->compression_topk > (uint64_t)o->compression_chunk * o->compression_chunk)
    FAIL(ERR_MODEL_INVALID, "optimizer.compression_topk must be in 1..compression_chunk^2");
  if (o->quantize_1bit > 1) FAIL(ERR_MODEL_INVALID, "optimizer.quantize_1bit must be a bool");
  return SUCCESS;
}

uint64_t coord_check_model_fits_config(const ModelConfig *m, const RunConfig *c, const char **why) {
  if (m->cold_start_warmup_steps == 0 || c->max_round_train_time == 0) return SUCCESS;
  uint64_t rounds = (c->epoch_time - c->warmup_time) / c->max_round_train_time;
  if (m->cold_start_warmup_steps > rounds)
    FAIL(ERR_MODEL_INVALID, "cold_start_warmup_steps must fit in one epoch: <= (epoch_time - warmup_time) / max_round_train_time");
  return SUCCESS;
}

uint64_t coord_check_progress(const Progress *p, const char **why) {
  if (p->step == 0) FAIL(ERR_PROGRESS_INVALID, "progress.step must be > 0");
  return SUCCESS;
}

uint64_t coord_check_metadata(const RunMetadata *m, const char **why) {
  uint64_t len;
  if (!padded_string(m->name, COORD_NAME_LEN, &len)) FAIL(ERR_METADATA_INVALID, "name must be NUL-padded");
  if (!padded_string(m->description, COORD_DESCRIPTION_LEN, &len))
    FAIL(ERR_METADATA_INVALID, "description must be NUL-padded");
  if (!padded_string(m->client_version, COORD_CLIENT_VERSION_LEN, &len))
    FAIL(ERR_METADATA_INVALID, "client_version must be NUL-padded");
  return SUCCESS;
}
