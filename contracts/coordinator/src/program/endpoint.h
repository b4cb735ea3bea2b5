/* Endpoint accounts, PDA ["endpoint", run, wallet]: a member's network address, written by its join_run.
   Peers read every member's address with one getMultipleAccounts (no transaction-log scan that strangers
   could flood or forge), and only this program writes them. */
#pragma once
#include <sol.h>

#include "../core/coordinator.h"

/* Write the joining wallet's Endpoint account at p->ka[at] (creating it, the user paying the rent, with the
   System program at p->ka[at + 1]). */
uint64_t write_endpoint(const SolParameters *p, uint64_t at, const JoinRunArgs *args, uint64_t join_marker);
/* Whether the wallet's Endpoint account at p->ka[at] holds another address than `args` (or none). */
bool endpoint_differs(const SolParameters *p, uint64_t at, const JoinRunArgs *args);
/* Close the wallet's Endpoint account at p->ka[at] (if it exists), refunding its rent to the wallet; an
   empty account must be at the Endpoint's address. */
uint64_t close_endpoint(const SolParameters *p, uint64_t at);
/* close_endpoint's instruction, [wallet, endpoint, run]: once the run is closed (`run_closed`), or no longer
   registers the wallet. */
uint64_t close_stale_endpoint(const SolParameters *p, bool run_closed);
