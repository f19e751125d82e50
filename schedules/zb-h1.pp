# zb-h1.pp - Zero Bubble ZB-H1: 1F1B with the backward split in two.
#
# Paper: Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism"
# (ICLR 2024), section 3.1 and Figure 3. B computes only the gradient w.r.t.
# the input, which is what the previous stage waits for; W (the weight
# gradient) can wait, so it fills the bubbles 1F1B leaves.
#
# The handcrafted order, as the reference implementations write it
# (InternEvo's ZeroBubblePipelineScheduler, PyTorch's
# ScheduleInterleavedZeroBubble with one stage per rank): rank r runs
# 1F1B's warm-up of k = S-1-r forwards, then steps of F, B and - from step r
# on - the W of the oldest microbatch whose W is still pending; the last r
# W's fill the tail. In a strict order that is the sequence of slots
#   F(b) at 3(b-k),  B(b) at 3b+1,  W(b) at 3(b+r)+2.
# Rank r holds at most S-r microbatches between F and B (1F1B's peak) and r
# pending W's; the bubble is (S-1)(T_F+T_B-T_W), a third of 1F1B's when
# T_F = T_B = T_W.
#
# Parameters: -D S=stages -D B=microbatches.

param S = 4
param B = 8
param W = S

# constraints: a -D that breaks one fails the compile, saying which
require W == S, "compute = s puts stage s on worker s: W must be S"

split backward

let k = min(S - 1 - s, B)    # warm-up forwards on rank s

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == F ? 3 * (b - k) : d == B ? 3 * b + 1 : 3 * (b + s) + 2
order strict

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: S=W    # what ppc --search tries (compiler/README.md)
