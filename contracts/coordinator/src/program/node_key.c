/* A join names its node id (the iroh key results and points are attributed to); the node proves it holds
   that key with an Ed25519 program instruction earlier in the same transaction. The native program has
   verified every signature it lists by the time we run; what we check is that one of them is by this key,
   over this message, and that its offsets point into its own data: an Ed25519 instruction may take its key,
   signature or message from another instruction, and then the bytes it checked are not the ones we read. */
#include "node_key.h"

#define ED25519_OFFSETS_START 2 /* u8 count, u8 padding */
#define ED25519_OFFSETS_SIZE 14 /* seven u16: signature, key and message offsets with instruction indices */
#define ED25519_SIGNATURE_LEN 64
#define THIS_INSTRUCTION 0xffff
#define JOIN_PROOF_LEN (COORD_JOIN_PROOF_PREFIX_LEN + 2 * SIZE_PUBKEY)
#define ACCOUNT_META_LEN (1 + SIZE_PUBKEY) /* flags, key */

static uint64_t get_u16(const uint8_t *p) { return (uint64_t)p[0] | (uint64_t)p[1] << 8; }

static bool is_own(uint64_t instruction_index, uint64_t own_index) {
  return instruction_index == THIS_INSTRUCTION || instruction_index == own_index;
}

/* Does one signature listed in this Ed25519 instruction's data sign `message` under `key`? */
static bool ed25519_proves(const uint8_t *data, uint64_t len, uint64_t own_index, const SolPubkey *key,
                           const uint8_t *message) {
  if (len < ED25519_OFFSETS_START) return false;
  uint64_t count = data[0];
  if (ED25519_OFFSETS_START + count * ED25519_OFFSETS_SIZE > len) return false;
  for (uint64_t i = 0; i < count; i++) {
    const uint8_t *o = data + ED25519_OFFSETS_START + i * ED25519_OFFSETS_SIZE;
    uint64_t signature_at = get_u16(o), key_at = get_u16(o + 4), message_at = get_u16(o + 8), message_len = get_u16(o + 10);
    if (!is_own(get_u16(o + 2), own_index) || !is_own(get_u16(o + 6), own_index) || !is_own(get_u16(o + 12), own_index))
      continue;
    if (signature_at + ED25519_SIGNATURE_LEN > len || key_at + SIZE_PUBKEY > len || message_at + message_len > len) continue;
    if (message_len == JOIN_PROOF_LEN && sol_memcmp(data + key_at, key->x, SIZE_PUBKEY) == 0 &&
        sol_memcmp(data + message_at, message, JOIN_PROOF_LEN) == 0)
      return true;
  }
  return false;
}

/* Instructions sysvar data: u16 count, u16 offset of each instruction, the instructions, and last the u16
   index of the executing one. An instruction: u16 account count, (u8 flags, key) per account, program id,
   u16 data length, data. */
uint64_t check_node_key_proof(const SolAccountInfo *instructions, const SolPubkey *run, const SolPubkey *wallet,
                              const SolPubkey *node_key) {
  if (!sol_pubkey_eq(instructions->key, &COORD_INSTRUCTIONS_SYSVAR_ID)) return ERR_WRONG_SYSVAR;
  const uint8_t *d = instructions->data;
  uint64_t n = instructions->data_len;
  if (n < 4) return ERR_NODE_KEY_NOT_PROVEN;
  uint64_t count = get_u16(d), current = get_u16(d + n - 2);
  if (2 + 2 * count + 2 > n || current >= count) return ERR_NODE_KEY_NOT_PROVEN;
  uint8_t message[JOIN_PROOF_LEN];
  sol_memcpy(message, COORD_JOIN_PROOF_PREFIX, COORD_JOIN_PROOF_PREFIX_LEN);
  sol_memcpy(message + COORD_JOIN_PROOF_PREFIX_LEN, run->x, SIZE_PUBKEY);
  sol_memcpy(message + COORD_JOIN_PROOF_PREFIX_LEN + SIZE_PUBKEY, wallet->x, SIZE_PUBKEY);
  for (uint64_t k = 0; k < current; k++) {
    uint64_t at = get_u16(d + 2 + 2 * k);
    if (at + 2 > n) return ERR_NODE_KEY_NOT_PROVEN;
    at += 2 + get_u16(d + at) * ACCOUNT_META_LEN;
    if (at + SIZE_PUBKEY + 2 > n) return ERR_NODE_KEY_NOT_PROVEN;
    const SolPubkey *program = (const SolPubkey *)(d + at);
    uint64_t data_len = get_u16(d + at + SIZE_PUBKEY);
    at += SIZE_PUBKEY + 2;
    if (at + data_len > n) return ERR_NODE_KEY_NOT_PROVEN;
    if (sol_pubkey_eq(program, &COORD_ED25519_PROGRAM_ID) && ed25519_proves(d + at, data_len, k, node_key, message))
      return SUCCESS;
  }
  return ERR_NODE_KEY_NOT_PROVEN;
}
