# zb-v.pp - ZB-V: the V-shaped zero bubble schedule, two stages per worker.
#
# Paper: Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism"
# (ICLR 2024), section 6 (ZB-V); the order is that of
# torch.distributed.pipelining.ScheduleZBVZeroBubble
# (_calculate_single_rank_operations). S = 2W stages placed in a V: worker
# r holds stage r (chunk 0) and stage 2W-1-r (chunk 1), so worker 0 holds
# the first and the last stage and the turn of the V stays on worker W-1.
# The backward is split (B: input gradient, W: weight gradient).
#
# Order of worker r, with n = max(2W-1, B) (PyTorch plans n microbatches and
# drops the jobs of microbatches >= B; dropping keeps the order):
#   2(W-r)-1 chunk-0 forwards;  r pairs F1 F0;  W-r triples F1 B1 W1;
#   n-W steps F0 B0 W0 F1 B1 W1 (no F0 once all are out);
#   r pairs B0 B1;  W-r pairs B0 W0;  the remaining W1's, then W0's.
# Each job's priority below is its position in that sequence (positions of
# a step's missing F0 stay empty), so the strict order is PyTorch's.
#
# Closed forms (unit costs, T_F = T_B = T_W = 1, B >= 2W-1): makespan
# 6B + W - 1, so each worker idles W-1 (the fill of the V; the W's fill
# everything else), the same as interleaved-zb.pp at V = 2; every worker
# holds at most 2W chunk-activations between F and B (worker 0 of 1F1B
# holds W full-model microbatches, 2W chunks: ZB-V keeps 1F1B's memory and
# balances it over the workers). The sim suite checks both. For B < 2W-1
# PyTorch keeps the order of the larger plan, and the bubble grows (W = 4,
# B = 4: makespan 30 for 24 of work).
#
# Parameters: -D W=workers -D B=microbatches.

param W = 4
param B = 8
param S = 2 * W

# constraints: a -D that breaks one fails the compile, saying which
require S == 2 * W, "worker r holds stages r and 2W-1-r: S must be 2W"

split backward

let c  = s >= W ? 1 : 0                  # chunk: 0 on the way down, 1 on the way up
let r  = c == 1 ? 2 * W - 1 - s : s      # the worker
let n  = max(2 * W - 1, B)
let A  = 2 * W - 2 * r - 1               # end of the chunk-0 warm-up
let H  = 2 * W - 1                       # end of the F1 F0 pairs
let C  = 5 * W - 3 * r - 1               # start of the steady steps
let D  = C + 6 * (n - W)                 # start of the cool-down
let E  = D + 2 * r
let Fw = E + 2 * (W - r)                 # the trailing W's
let f0 = b < A ? b : b < 2 * W - r - 1 ? A + 2 * (b - A) + 1 : C + 6 * (b - (2 * W - r - 1))
let f1 = b < r ? A + 2 * b : b < W ? H + 3 * (b - r) : C + 6 * (b - W) + 3
let i0 = b < n - W ? C + 6 * b + 1 : b < n - W + r ? D + 2 * (b - (n - W)) : E + 2 * (b - (n - W + r))
let i1 = b < W - r ? H + 3 * b + 1 : b < n - r ? C + 6 * (b - (W - r)) + 4 : D + 2 * (b - (n - r)) + 1
let w0 = b < n - W ? C + 6 * b + 2 : b < n - r ? E + 2 * (b - (n - W)) + 1 : Fw + r + b - (n - r)
let w1 = b < W - r ? H + 3 * b + 2 : b < n - r ? C + 6 * (b - (W - r)) + 5 : Fw + b - (n - r)

compute(s,b,d)  = r
weights(s,b,d)  = r
priority(s,b,d) = d == F ? (c == 0 ? f0 : f1) : d == B ? (c == 0 ? i0 : i1) : (c == 0 ? w0 : w1)
order strict

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: S=2*W    # what ppc --search tries (compiler/README.md)
