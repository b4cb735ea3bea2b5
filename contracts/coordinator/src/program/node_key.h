/* Proof of possession of a node key: the join transaction carries an Ed25519 signature by the node. */
#pragma once
#include <sol.h>

#include "../core/coordinator.h"

/* SUCCESS when an instruction before this one in the transaction is the native Ed25519 program checking
   a signature by `node_key` over "cohort join v1" || run || wallet, with every offset of that signature
   inside its own instruction data. `instructions` must be the Instructions sysvar. */
uint64_t check_node_key_proof(const SolAccountInfo *instructions, const SolPubkey *run, const SolPubkey *wallet,
                              const SolPubkey *node_key);
