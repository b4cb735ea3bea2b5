/* Creating program-derived accounts through the System program. */
#pragma once
#include <sol.h>

/* Who pays for a new program-derived account, the account, and the System program's account. */
typedef struct {
  const SolParameters *p;
  const SolAccountInfo *payer; /* writable signer: pays the rent */
  SolAccountInfo *account;     /* the PDA; its data_len is updated */
  const SolAccountInfo *system_program;
} NewAccount;

/* Derive the PDA of seeds[0..n) (seeds[n] is filled with the bump), require it to be the account, and
   create it with `space` bytes owned by this program, also when someone already sent it lamports. */
uint64_t create_pda_at(const NewAccount *c, SolSignerSeed *seeds, int n, uint64_t space, uint8_t *bump);
