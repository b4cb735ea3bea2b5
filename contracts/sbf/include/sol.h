/* cohort's mini SDK for Solana programs written in C (SBPF v0, built by contracts/sbf).
   One include gives everything; the parts are split by idea under sol/. */
#pragma once
#include "sol/types.h"
#include "sol/error.h"
#include "sol/math.h"
#include "sol/mem.h"
#include "sol/syscalls.h"
#include "sol/log.h"
#include "sol/heap.h"
#include "sol/sysvar.h"
#include "sol/entrypoint.h"
#include "sol/cpi.h"
#include "sol/pda.h"
