/* link_fit.h - what ppvm --profile makes of its link probe's times (issue
 * 29), apart from MPI so that the unit tests can feed it a modelled link:
 * the rate and token-bucket burst from two large sizes, and whether an
 * all-reduce's time is a ring's or a tree's. profile.h says how the times
 * are taken. */
#ifndef PP_LINK_FIT_H
#define PP_LINK_FIT_H

#include <stddef.h>

/* From the fastest one-way times t0 of 8 bytes, t1 of m1 bytes and t2 of
 * m2 > m1 bytes, both sizes past twice the burst (a tbf link refills while
 * the other side sends back, so each large trip takes latency + (m -
 * burst) / rate): *bandwidth = (m2 - m1) / (t2 - t1), *burst = m1 -
 * bandwidth * (t1 - t0) within [0, m1]. Where noise leaves t2 <= t1, the
 * whole one-way time of m2 counts as transfer (a lower bound on the
 * bandwidth, never 0, which a --costs file reads as unlimited) and the
 * burst is 0. */
void pp_link_fit(double t0, size_t m1, double t1, size_t m2, double t2, double *bandwidth,
                 double *burst);

/* Whether a token bucket is there at all: tm, the fastest one-way time of
 * m bytes (each trip after a pause that refills m twice over), less t0,
 * the 8-byte time, is under half what m takes at `bandwidth`, as a burst
 * passes it at the line's speed. pp_link_fit reads a burst from any trip
 * of m1 bytes faster than the slope says: on Open MPI's shared memory
 * (10 GB/s, no bucket) 3 to 111 KB in 4 profiles of 7, which made ppc
 * price the link as shaped; there 32 KB took about what its bytes cost. */
int pp_link_burst_seen(double t0, size_t m, double tm, double bandwidth);
#define PP_BURST_PROBE_BYTES ((size_t)32 << 10) /* below tbf's bursts seen (57 KB at 200 Mbit/s) */

/* Whether t, an all-reduce of n bytes over R >= 2 ranks, is nearer (in
 * ratio) a binomial tree's time, 2 ceil(log2 R) whole messages in turn, each
 * from a full bucket, than a ring's, each rank sending 2 (R - 1) pieces of
 * n / R back to back from one; 1 tree, 0 ring. */
int pp_allreduce_is_tree(double t, double n, int R, double latency, double bandwidth, double burst);

/* Whether t, the time of an exchange of n bytes (both ends sending at once,
 * each from a full bucket), is nearer (in ratio) the two directions in turn,
 * latency + (2 n - burst) / bandwidth (one bucket between them), than at
 * once, latency + (n - burst) / bandwidth; 1 half duplex, 0 full. */
int pp_link_half_duplex(double t, double n, double latency, double bandwidth, double burst);

#endif
