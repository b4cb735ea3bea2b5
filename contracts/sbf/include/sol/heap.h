/* A bump allocator on the program heap. Programs have no mutable globals, so the bump pointer lives in the
   first 8 bytes of the heap itself. Memory is never freed: one instruction is short-lived. A program that
   requests a bigger heap frame (RequestHeapFrame) defines SOL_HEAP_LENGTH before including this header. */
#pragma once
#include "mem.h"
#include "types.h"

#define SOL_HEAP_START 0x300000000ULL
#ifndef SOL_HEAP_LENGTH
#define SOL_HEAP_LENGTH (32 * 1024)
#endif

#ifdef __bpf__
/* Zeroed, 8-byte aligned memory for n * size bytes, or NULL when the heap is exhausted or n * size overflows. */
static inline void *sol_calloc(uint64_t n, uint64_t size) {
  uint64_t *bump = (uint64_t *)SOL_HEAP_START;
  const uint64_t end = SOL_HEAP_START + SOL_HEAP_LENGTH;
  if (*bump == 0) *bump = SOL_HEAP_START + sizeof(uint64_t); /* first use: skip the pointer itself */
  if (size != 0 && n > UINT64_MAX / size) return NULL;
  uint64_t bytes = (n * size + 7) & ~7ULL;
  uint64_t start = *bump;
  if (bytes > end - start) return NULL;
  *bump = start + bytes;
  /* the heap starts zeroed; memset anyway so the contract does not depend on that */
  sol_memset((void *)start, 0, bytes);
  return (void *)start;
}
#endif
