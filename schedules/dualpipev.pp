# dualpipev.pp - DualPipeV's order (DeepSeek's DualPipe, "cut in half"), as
# PyTorch's ScheduleDualPipeV emits it.
#
# Paper: DeepSeek-AI, "DeepSeek-V3 Technical Report" (2024), section 3.2.1
# (DualPipe); DualPipeV is the V-shaped variant of deepseek-ai/DualPipe
# (dualpipev.py), and the order here is that of
# torch.distributed.pipelining.ScheduleDualPipeV
# (_calculate_single_rank_operations). S = 2W stages in a V as zb-v.pp:
# worker r holds stage r (chunk 0) and stage 2W-1-r (chunk 1).
#
# Order of worker r (n = B microbatches, n >= 2W):
#   1. 2(W-r-1) chunk-0 forwards
#   2. r+1 pairs F0 F1
#   3. W-r-1 triples B1 W1 F1 (split backward: zero bubble)
#   4. n-2W+r+1 steps F0 B1 F1 B0 with whole backwards, each forward
#      overlapped with the backward after it (PyTorch's OVERLAP_F_B pairs
#      "F0B1" and "F1B0"), except the first F0 B1 of the last worker
#      (r = W-1), which PyTorch leaves unpaired to shorten the bubble
#   5. W-r-1 steps B1 F1 B0, F1 overlapped with B0 (B1 single)
#   6. r+1 pairs B1 B0; from the middle pair on (h = (r+1)/2; on even r
#      from its B0, on odd r from its B1) the backwards are split again
#   7. W-r-1 pairs W B0 (split), each W the oldest pending one
#   8. the r+1 remaining W's, oldest first.
# Which backwards are split depends on the job: `split backward when sp`
# below. The priority of each job is its position in that sequence, so the
# strict order is PyTorch's; the orders suite compares it at every golden
# shape, whole and split backwards alike.
#
# The overlap: DualPipe runs a forward of one chunk and a backward of the
# other at once on a worker, so that each one's communication hides under
# the other's compute. `overlap F then B when pr` pairs exactly PyTorch's
# OVERLAP_F_B actions: every chunk-1 forward of steps 4 and 5 (b >= W) and
# every chunk-0 forward of step 4 (b >= 2W-r-1; on r = W-1 from b = W+1),
# each with the backward right after it. `then`, not `with`: in step 5's
# B1 F1 B0 the forward pairs with the B0 after it, never the B1 before it.
# A pair takes max(tF, tB) + P% of min(tF, tB) (`cost overlap = P`; PyTorch
# overlaps on one device, so the default P = 50 is a guess between none and
# full hiding: -D P=100 is the order run one job after the other).
# The orders suite compares the pairs with PyTorch's at every golden shape.
# Unit costs (a whole backward costs 2), W = 4, B = 16: 89 pairs; makespan
# 76 at P = 0, 89 at P = 50, 102 at P = 100, against 99 for the same order
# without `overlap` (a pair waits for both jobs' inputs, so with no gain it
# costs a little).
#
# Parameters: -D W=workers -D B=microbatches -D P=percent.

param W = 4
param B = 10
param S = 2 * W
param P = 50

# constraints: a -D that breaks one fails the compile, saying which
require S == 2 * W, "worker r holds stages r and 2W-1-r: S must be 2W"
require B >= 2 * W, "DualPipeV needs at least as many microbatches as stages (B >= S = 2W)"


let c  = s >= W ? 1 : 0                  # chunk: 0 on the way down, 1 on the way up
let r  = c == 1 ? 2 * W - 1 - s : s      # the worker
let n  = B
let e  = r % 2 == 0 ? 1 : 0              # even r: step 6 splits from its B0 on
let h  = (r + 1) / 2                     # step 6's middle pair
let a1 = 2 * (W - r - 1)                 # where each step of the order starts
let a2 = a1 + 2 * (r + 1)
let a3 = a2 + 3 * (W - r - 1)
let a4 = a3 + 4 * (n - 2 * W + r + 1)
let a5 = a4 + 3 * (W - r - 1)
let a6 = a5 + 2 * (r + 1)
let a7 = a6 + 2 * (W - r - 1)

# PyTorch splits chunk 1's step-3 backwards and step 6's second half, and
# chunk 0's from step 6's middle on; its other backwards are whole.
let sp = c == 1 ? b < W - r - 1 || b >= n - r - 1 + h + e : b >= n - W + h
split backward when sp

let f0 = b < a1 ? b : b < a1 + r + 1 ? a1 + 2 * (b - a1) : a3 + 4 * (b - (2 * W - r - 1))
let f1 = b < r + 1 ? a1 + 2 * b + 1
       : b < W ? a2 + 3 * (b - r - 1) + 2
       : b < n - W + r + 1 ? a3 + 4 * (b - W) + 2
       : a4 + 3 * (b - (n - W + r + 1)) + 1
let b0 = b < n - 2 * W + r + 1 ? a3 + 4 * b + 3
       : b < n - W ? a4 + 3 * (b - (n - 2 * W + r + 1)) + 2
       : b < n - W + r + 1 ? a5 + 2 * (b - (n - W)) + 1
       : a6 + 2 * (b - (n - W + r + 1)) + 1
let b1 = b < W - r - 1 ? a2 + 3 * b
       : b < n - W ? a3 + 4 * (b - (W - r - 1)) + 1
       : b < n - r - 1 ? a4 + 3 * (b - (n - W))
       : a5 + 2 * (b - (n - r - 1))
# the W's after step 3 pop a queue in the order their B's ran: the k-th
# pending W runs at wk(k); k for each split backward of steps 6 and 7
let k  = c == 1 ? 2 * (b - (n - r - 1)) - 2 * h - e
       : b <= n - W + r ? 2 * (b - (n - W) - h) + 1 - e
       : b - (n - W)
let wk = k < W - r - 1 ? a6 + 2 * k : a7 + k - (W - r - 1)
let w1 = b < W - r - 1 ? a2 + 3 * b + 1 : wk

compute(s,b,d)  = r
weights(s,b,d)  = r
priority(s,b,d) = d == F ? (c == 0 ? f0 : f1) : d == B ? (c == 0 ? b0 : b1) : (c == 0 ? wk : w1)
order strict

# PyTorch's OVERLAP_F_B pairs: each of them a forward and the backward after it
let pr = c == 1 ? b >= W : b >= 2 * W - r - 1 + (r == W - 1 ? 1 : 0)
overlap F then B when pr
cost overlap = P

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: S=2*W    # what ppc --search tries (compiler/README.md)
