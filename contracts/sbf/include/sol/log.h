/* Program logs. `sol_log` takes a C string literal; `sol_log_data` emits a base64 "Program data:" line
   (how Anchor events travel). */
#pragma once
#include "syscalls.h"
#include "types.h"

static inline uint64_t sol_strlen(const char *s) {
  uint64_t n = 0;
  while (s[n]) n++;
  return n;
}

#ifdef __bpf__
#define sol_log(message) sol_log_((message), sol_strlen(message))
#define sol_log_64 sol_log_64_
#define sol_log_compute_units sol_log_compute_units_
/* Abort with the source location in the log. */
#define sol_panic() sol_panic_(__FILE__, sizeof(__FILE__) - 1, __LINE__, 0)
#define sol_assert(expr) \
  do {                   \
    if (!(expr)) {       \
      sol_log(#expr);    \
      sol_panic();       \
    }                    \
  } while (0)
#endif
