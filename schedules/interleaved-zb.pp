# interleaved-zb.pp - PyTorch's ScheduleInterleavedZeroBubble: interleaved
# 1F1B with the backward split, V stages per worker.
#
# Paper: Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism"
# (ICLR 2024), applied to Megatron's interleaving; the order is that of
# torch.distributed.pipelining.ScheduleInterleavedZeroBubble
# (_get_1f1b_rank_ops with enable_zero_bubble). Stage s lives on worker
# s % W (chunk s / W); S = W * V.
#
# Order. PyTorch runs R = max(1, B / W) rounds of G = B / R microbatches
# (G must divide B); forwards are numbered k round by round, chunk by chunk,
# backwards i likewise with the chunks reversed. Worker r runs warm =
# (V-1)G + (W-1-r) warm-up forwards (at most B*V), then steps of a forward,
# a backward-for-input (B) and, from step r on, the oldest pending
# weight-gradient (W); the last r W's fill the tail. In a strict order:
#   F(k) at k in warm-up, 3k - 2 warm after;  B(i) at warm + 3i + 1;
#   W(i) at warm + 3(i + r) + 2.
# With V = 1 this is zb-h1.pp.
#
# Closed forms (unit costs, T_F = T_B = T_W = 1, B >= W): makespan
# 3VB + W - 1 (each worker idles W-1: the W's fill the rest of 1F1B's
# bubble); worker r holds at most warm + 1 microbatch-chunks between F and B
# (1F1B's interleaved warm-up with a factor 1 instead of 2) and r pending
# W's. The sim suite checks both.
#
# Constraints (the require lines below): S = W * V; B a multiple of
# max(1, B / W) (PyTorch refuses other B, e.g. W = 4, B = 9).
# Parameters: -D W=workers -D V=chunks -D B=microbatches.

param W = 4
param V = 2
param B = 8
param S = W * V
param R = max(1, B / W)     # PyTorch's rounds
param G = B / R             # microbatches per round

# constraints: a -D that breaks one fails the compile, saying which
require S == W * V, "stage s lives on worker s % W as chunk s / W: S must be W * V"
require B % R == 0, "PyTorch runs max(1, B / W) rounds of equal size: B must be a multiple of max(1, B / W)"

split backward

let chunk = s / W
let r     = s % W
let warm  = min((V - 1) * G + (W - 1 - r), B * V)
let kf    = (b / G) * G * V + chunk * G + b % G
let kb    = (b / G) * G * V + (V - 1 - chunk) * G + b % G

compute(s,b,d)  = s % W
weights(s,b,d)  = s % W
priority(s,b,d) = d == F ? (kf < warm ? kf : 3 * kf - 2 * warm)
                : d == B ? warm + 3 * kb + 1
                :          warm + 3 * (kb + r) + 2
order strict

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: V=1..4    # what ppc --search tries (compiler/README.md)
