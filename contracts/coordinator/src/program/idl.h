/* Anchor's IDL instructions, so Anchor tooling and the Solana Explorer find the coordinator's IDL on chain
   like any Anchor program's. */
#pragma once
#include <sol.h>

/* The first 8 bytes of every IDL instruction (Anchor's IDL_IX_TAG, little-endian). */
#define ANCHOR_IDL_IX_TAG 0x0a69e9a778bcf440ULL

/* Create, Write, SetAuthority or Close the IDL account (the other Anchor IDL instructions are refused). */
uint64_t anchor_idl(SolParameters *p);
