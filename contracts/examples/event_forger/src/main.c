/* event_forger: logs its whole instruction data as one `sol_log_data` field, so its transaction can carry
   the exact bytes of another program's event (Anchor: sha256("event:<Name>")[:8] + Borsh). It accepts any
   accounts (read-only or writable, owned by anyone) and touches none of them. */
#include <sol.h>

uint64_t entrypoint(const uint8_t *input) {
  SolParameters params = {0};
  sol_deserialize(input, &params, 0); /* no account is kept: only the instruction data is read */
  SolBytes field = {params.data, params.data_len};
  sol_log_data(&field, 1);
  return SUCCESS;
}
