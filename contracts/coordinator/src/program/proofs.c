/* Signed statements. A join names its node id (the iroh key results and points are attributed to); the
   node proves it holds that key with an Ed25519 program instruction earlier in the same transaction. A
   trainer signs a statement for each result it publishes; two for one epoch and step are an equivocation
   proof (the epoch never repeats, so a step the authority rewound pairs no old statement with a new one).
   The native program has verified every signature it lists by the time we run; what we check is that one
   of them is by this key, over this message, and that its offsets point into its own data: an Ed25519
   instruction may take its key, signature or message from another instruction, and then the bytes it
   checked are not the ones we read. */
#include "proofs.h"

#define ED25519_OFFSETS_START 2 /* u8 count, u8 padding */
#define ED25519_OFFSETS_SIZE 14 /* seven u16: signature, key and message offsets with instruction indices */
#define ED25519_SIGNATURE_LEN 64
#define THIS_INSTRUCTION 0xffff
#define JOIN_PROOF_LEN (COORD_JOIN_PROOF_PREFIX_LEN + 2 * SIZE_PUBKEY + 8)
#define RESULT_PROOF_LEN (COORD_RESULT_PROOF_PREFIX_LEN + SIZE_PUBKEY + 4 + 4 + 8 + 8 + 32)
#define ACCOUNT_META_LEN (1 + SIZE_PUBKEY) /* flags, key */

static uint64_t get_u16(const uint8_t *p) { return (uint64_t)p[0] | (uint64_t)p[1] << 8; }

static bool is_own(uint64_t instruction_index, uint64_t own_index) {
  return instruction_index == THIS_INSTRUCTION || instruction_index == own_index;
}

/* Does one signature listed in this Ed25519 instruction's data sign `message` under `key`? */
static bool ed25519_proves(const uint8_t *data, uint64_t len, uint64_t own_index, const SolPubkey *key,
                           const uint8_t *message, uint64_t expected_len) {
  if (len < ED25519_OFFSETS_START) return false;
  uint64_t count = data[0];
  if (ED25519_OFFSETS_START + count * ED25519_OFFSETS_SIZE > len) return false;
  for (uint64_t i = 0; i < count; i++) {
    const uint8_t *o = data + ED25519_OFFSETS_START + i * ED25519_OFFSETS_SIZE;
    uint64_t signature_at = get_u16(o), key_at = get_u16(o + 4), message_at = get_u16(o + 8), message_len = get_u16(o + 10);
    if (!is_own(get_u16(o + 2), own_index) || !is_own(get_u16(o + 6), own_index) || !is_own(get_u16(o + 12), own_index))
      continue;
    if (signature_at + ED25519_SIGNATURE_LEN > len || key_at + SIZE_PUBKEY > len || message_at + message_len > len) continue;
    if (message_len == expected_len && sol_memcmp(data + key_at, key->x, SIZE_PUBKEY) == 0 &&
        sol_memcmp(data + message_at, message, expected_len) == 0)
      return true;
  }
  return false;
}

/* Instructions sysvar data: u16 count, u16 offset of each instruction, the instructions, and last the u16
   index of the executing one. An instruction: u16 account count, (u8 flags, key) per account, program id,
   u16 data length, data. True when an instruction before the executing one proves `message` by `key`. */
static bool signed_earlier(const SolAccountInfo *instructions, const SolPubkey *key, const uint8_t *message,
                           uint64_t message_len) {
  const uint8_t *d = instructions->data;
  uint64_t n = instructions->data_len;
  if (n < 4) return false;
  uint64_t count = get_u16(d), current = get_u16(d + n - 2);
  if (2 + 2 * count + 2 > n || current >= count) return false;
  for (uint64_t k = 0; k < current; k++) {
    uint64_t at = get_u16(d + 2 + 2 * k);
    if (at + 2 > n) return false;
    at += 2 + get_u16(d + at) * ACCOUNT_META_LEN;
    if (at + SIZE_PUBKEY + 2 > n) return false;
    const SolPubkey *program = (const SolPubkey *)(d + at);
    uint64_t data_len = get_u16(d + at + SIZE_PUBKEY);
    at += SIZE_PUBKEY + 2;
    if (at + data_len > n) return false;
    if (sol_pubkey_eq(program, &COORD_ED25519_PROGRAM_ID) && ed25519_proves(d + at, data_len, k, key, message, message_len))
      return true;
  }
  return false;
}

uint64_t check_node_key_proof(const SolAccountInfo *instructions, const SolPubkey *run, const SolPubkey *wallet,
                              const SolPubkey *node_key, uint64_t join_marker) {
  if (!sol_pubkey_eq(instructions->key, &COORD_INSTRUCTIONS_SYSVAR_ID)) return ERR_WRONG_SYSVAR;
  uint8_t message[JOIN_PROOF_LEN];
  uint8_t *at = message;
  sol_memcpy(at, COORD_JOIN_PROOF_PREFIX, COORD_JOIN_PROOF_PREFIX_LEN);
  sol_memcpy(at += COORD_JOIN_PROOF_PREFIX_LEN, run->x, SIZE_PUBKEY);
  sol_memcpy(at += SIZE_PUBKEY, wallet->x, SIZE_PUBKEY);
  sol_put_u64(at + SIZE_PUBKEY, join_marker);
  return signed_earlier(instructions, node_key, message, JOIN_PROOF_LEN) ? SUCCESS : ERR_NODE_KEY_NOT_PROVEN;
}

uint64_t check_result_statement(const SolAccountInfo *instructions, const SolPubkey *run, const SolPubkey *node_key,
                                const StatementWhen *when, const ResultStatement *statement) {
  if (!sol_pubkey_eq(instructions->key, &COORD_INSTRUCTIONS_SYSVAR_ID)) return ERR_WRONG_SYSVAR;
  uint8_t message[RESULT_PROOF_LEN];
  uint8_t *at = message;
  sol_memcpy(at, COORD_RESULT_PROOF_PREFIX, COORD_RESULT_PROOF_PREFIX_LEN);
  sol_memcpy(at += COORD_RESULT_PROOF_PREFIX_LEN, run->x, SIZE_PUBKEY);
  sol_put_u32(at += SIZE_PUBKEY, when->epoch);
  sol_put_u32(at += 4, when->step);
  sol_put_u64(at += 4, statement->batch_start);
  sol_put_u64(at += 8, statement->batch_end);
  sol_memcpy(at + 8, statement->commitment, 32);
  return signed_earlier(instructions, node_key, message, RESULT_PROOF_LEN) ? SUCCESS : ERR_EQUIVOCATION_NOT_PROVEN;
}
