/* standin.h - internals shared by the stand-in runtime (runtime.cpp) and the
 * stand-in NCCL (nccl.cpp). See tests/README.md. */
#ifndef PP_STANDIN_INTERNAL_H
#define PP_STANDIN_INTERNAL_H

#include <stddef.h>

#include <functional>

#include "include/cuda_runtime_api.h"

/* One byte range an operation reads or writes. */
struct pp_si_access {
    const void *p;
    size_t bytes;
    int write;
};

/* Where p .. p+bytes lies in one device (or pinned host) allocation: 1, or
 * 0 with why (a static string). */
int pp_si_device_range(const void *p, size_t bytes, const char **why);

/* Enqueues an operation on st (NULL: the legacy default stream) after
 * checking its accesses against every other stream's unordered ones (a
 * hazard ends the process with a message). At its turn, start() runs, then
 * done() is polled until it returns 1. */
void pp_si_enqueue(cudaStream_t st, const char *what, const pp_si_access *acc, int nacc,
                   std::function<void()> start, std::function<int()> done);

/* Stream capture (graph.cpp). take: when st is capturing, records the
 * operation (moving start and done) and returns 1, else 0. sync: a host
 * synchronisation; when a capture is active it invalidates every capture
 * and returns 1 (the call then fails with cudaErrorStreamCaptureUnsupported).
 * The event hooks make a stream that waits for an event recorded in a
 * capture join it. */
int pp_si_capture_take(cudaStream_t st, const char *what, const pp_si_access *acc, int nacc,
                       std::function<void()> &start, std::function<int()> &done);
int pp_si_capture_sync(void);
void pp_si_capture_event_record(cudaEvent_t ev, cudaStream_t st);
void pp_si_capture_event_wait(cudaStream_t st, cudaEvent_t ev);
/* For PP_STANDIN_REPORT: the graphs whose capture ended well, the
 * operations they hold and how many of those are memsets (a step's graph
 * that zeroes gradients with a memset shows it here). */
void pp_si_capture_counts(long *graphs, long *ops, long *memsets);

/* The device cudaSetDevice chose. */
extern "C" int pp_si_current_device(void);

/* Prints "pp stand-in: ..." and aborts. */
[[noreturn]] void pp_si_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
