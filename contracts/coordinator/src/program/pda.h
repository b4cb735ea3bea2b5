/* Creating program-derived accounts through the System program. */
#pragma once
#include <sol.h>

/* A program-derived account to create (SBF calls take at most five arguments, hence the struct). */
typedef struct {
  const SolParameters *p;
  const SolAccountInfo *payer;          /* writable signer: pays the rent */
  SolAccountInfo *account;              /* the PDA; its data_len is updated */
  const SolAccountInfo *system_program;
  const SolSignerSeeds *seeds;          /* the PDA's seeds, bump included */
} NewPda;

/* Create the PDA with `space` bytes, owned by this program (also when someone already sent it lamports). */
uint64_t create_pda(const NewPda *c, uint64_t space);
