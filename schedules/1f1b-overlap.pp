# 1f1b-overlap.pp - 1F1B whose steady-state forward/backward pairs overlap,
# as DualPipe overlaps a forward and a backward of different microbatches
# on one worker to hide each one's communication under the other's compute.
#
# Paper: DeepSeek-AI, "DeepSeek-V3 Technical Report" (2024), DualPipe; the
# order is 1F1B's (1f1b.pp): F0 .. F(warm), B0, F(warm+1), B1, ...
# In the steady state each B(b) sits next to F(b+warm+1); `overlap` runs
# them as one pair (ppc pairs neighbours front to back, so on the last
# worker, whose warm-up is empty, F0 B0 stay single: same microbatch).
# `cost overlap = P`: a pair takes max(tF, tB) + P% of min(tF, tB). With
# the default 100 a pair costs what the two cost one after the other.
#
# Parameters: -D S=stages -D B=microbatches -D P=percent.

param S = 4
param B = 8
param W = S
param P = 50

# constraints: a -D that breaks one fails the compile, saying which
require W == S, "compute = s puts stage s on worker s: W must be S"

let warm = S - 1 - s

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
order strict
overlap F with B when b > warm
cost B = 2
cost overlap = P

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: S=W    # what ppc --search tries (compiler/README.md)
