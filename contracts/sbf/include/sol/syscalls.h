/* The Agave syscalls this SDK uses. The linker checks every undefined name against Agave's syscall list,
   so a typo here fails at link time instead of at deploy time. On-chain only. */
#pragma once
#include "types.h"

#ifdef __bpf__
void sol_log_(const char *message, uint64_t len);
void sol_log_64_(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e);
void sol_log_compute_units_(void);
void sol_log_pubkey(const SolPubkey *pubkey);
void sol_log_data(const SolBytes *fields, uint64_t count);
void sol_panic_(const char *file, uint64_t len, uint64_t line, uint64_t column) __attribute__((noreturn));

uint64_t sol_sha256(const SolBytes *inputs, uint64_t count, uint8_t *result);
uint64_t sol_keccak256(const SolBytes *inputs, uint64_t count, uint8_t *result);

void sol_memcpy_(void *dst, const void *src, uint64_t n);
void sol_memmove_(void *dst, const void *src, uint64_t n);
void sol_memset_(void *dst, uint8_t c, uint64_t n);
void sol_memcmp_(const void *a, const void *b, uint64_t n, int32_t *result);

uint64_t sol_get_clock_sysvar(void *clock);
uint64_t sol_get_rent_sysvar(void *rent);
uint64_t sol_get_epoch_schedule_sysvar(void *schedule);
uint64_t sol_get_sysvar(const SolPubkey *sysvar_id, uint8_t *out, uint64_t offset, uint64_t length);

void sol_set_return_data(const uint8_t *data, uint64_t len);
uint64_t sol_get_return_data(uint8_t *data, uint64_t len, SolPubkey *program_id);
uint64_t sol_remaining_compute_units(void);
#endif
