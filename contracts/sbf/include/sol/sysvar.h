/* Sysvars read through their syscalls (no account needed in the instruction). */
#pragma once
#include "syscalls.h"
#include "types.h"

typedef struct {
  uint64_t slot;
  int64_t epoch_start_timestamp;
  uint64_t epoch;
  uint64_t leader_schedule_epoch;
  int64_t unix_timestamp;
} SolClock;
SOL_STATIC_ASSERT(sizeof(SolClock) == 40, "Clock sysvar is 40 bytes");
