/* Statements signed by node keys, checked by the native Ed25519 program earlier in the same transaction:
   a node's proof that it belongs to a wallet (join_run), and a trainer's signed results (equivocation). */
#pragma once
#include <sol.h>

#include "../core/coordinator.h"

/* SUCCESS when an instruction before this one is the Ed25519 program checking a signature by `node_key`
   over "cohort join v2" || run || wallet || join_marker (u64 LE), with every offset of that signature
   inside its own instruction data. `instructions` must be the Instructions sysvar. */
uint64_t check_node_key_proof(const SolAccountInfo *instructions, const SolPubkey *run, const SolPubkey *wallet,
                              const SolPubkey *node_key, uint64_t join_marker);

/* The epoch and step a result statement names. */
typedef struct {
  uint32_t epoch;
  uint32_t step;
} StatementWhen;

/* SUCCESS when an earlier Ed25519 instruction checks a signature by `node_key` over the result statement
   "cohort result v2" || run || epoch (u32 LE) || step (u32 LE) || batch_start || batch_end (u64 LE) ||
   commitment. */
uint64_t check_result_statement(const SolAccountInfo *instructions, const SolPubkey *run, const SolPubkey *node_key,
                                const StatementWhen *when, const ResultStatement *statement);
