# zb-h1.pp - Zero Bubble ZB-H1: 1F1B with the backward split in two.
#
# Paper: Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism"
# (ICLR 2024), section 3.1. B computes only the gradient w.r.t. the input,
# which is what the previous stage waits for; W (the weight gradient) can
# wait, so it fills the bubbles 1F1B leaves in its warm-up and cool-down.
# Written here with the seed's greedy rule: input gradients first, then
# forwards, weight gradients when nothing else is ready, and 1F1B's inflight
# limit (a microbatch's activations are held until its W), so peak memory
# stays 1F1B's while the bubble shrinks to about a third of it when
# T_F = T_B = T_W.
#
# Constraints: W = S.   Parameters: -D S=stages -D B=microbatches.

param S = 4
param B = 8
param W = S

split backward

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == B ? b : d == F ? B + b : 2 * B + b
limit inflight  = S - w
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
