/* What the run's authority may change, and when. */
#include "internal.h"

#define UPDATED_METADATA 1
#define UPDATED_CONFIG 2
#define UPDATED_MODEL 3
#define UPDATED_CHECKPOINTERS 4

/* An owner action that would leave the bytes as they are fails instead (a success bumps the nonce, and
   every subscriber then receives the whole account again). */
#define SAME(a, b) (sol_memcmp((a), (b), sizeof(*(a))) == 0)

static void emit_updated(const CoordEnv *env, uint8_t what) {
  RunUpdated event = {*env->run_key, what};
  coord_emit(EVENT_RUN_UPDATED, &event, sizeof(event));
}

uint64_t coord_update_metadata(Run *run, const CoordEnv *env, const RunMetadata *metadata, const char **why) {
  uint64_t status = coord_check_metadata(metadata, why);
  if (status != SUCCESS) return status;
  if (SAME(&run->metadata, metadata)) return ERR_NO_CHANGE;
  run->metadata = *metadata;
  emit_updated(env, UPDATED_METADATA);
  return SUCCESS;
}

static uint64_t check_halted(const Run *run) {
  if (run->run_state == RUN_STATE_FINISHED) return ERR_FINISHED;
  return coord_is_halted(run->run_state) ? SUCCESS : ERR_NOT_HALTED;
}

uint64_t coord_update_config(Run *run, const CoordEnv *env, const RunConfig *config, const Progress *progress,
                             const char **why) {
  uint64_t status = check_halted(run);
  if (status == SUCCESS) status = coord_check_config(config, why);
  if (status == SUCCESS) status = coord_check_progress(progress, why);
  if (status == SUCCESS) status = coord_check_model_fits_config(&run->model, config, why);
  if (status != SUCCESS) return status;
  /* While halted the current epoch number was never trained under (Cooldown's end moved it on). Result
     statements name their epoch, so one that repeats would let a rewound step pair an honest member's old
     statement with its new one as an equivocation proof. */
  if (progress->epoch < run->progress.epoch) {
    *why = "progress.epoch cannot go back (result statements name it)";
    return ERR_PROGRESS_INVALID;
  }
  if (SAME(&run->config, config) && SAME(&run->progress, progress)) return ERR_NO_CHANGE;
  run->config = *config;
  run->progress = *progress;
  emit_updated(env, UPDATED_CONFIG);
  return SUCCESS;
}

uint64_t coord_update_model(Run *run, const CoordEnv *env, const ModelConfig *model, const char **why) {
  uint64_t status = check_halted(run);
  if (status == SUCCESS) status = coord_check_model(model, why);
  if (status == SUCCESS) status = coord_check_model_fits_config(model, &run->config, why);
  if (status != SUCCESS) return status;
  if (SAME(&run->model, model)) return ERR_NO_CHANGE;
  run->model = *model;
  emit_updated(env, UPDATED_MODEL);
  return SUCCESS;
}

uint64_t coord_set_checkpointers(Run *run, const CoordEnv *env, const SolPubkey *checkpointers) {
  if (sol_memcmp(run->checkpointers, checkpointers, sizeof(run->checkpointers)) == 0) return ERR_NO_CHANGE;
  sol_memcpy(run->checkpointers, checkpointers, sizeof(run->checkpointers));
  emit_updated(env, UPDATED_CHECKPOINTERS);
  return SUCCESS;
}
