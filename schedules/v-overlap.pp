# v-overlap.pp - a V-shaped pipeline whose forward/backward pairs run
# overlapped, as DualPipe(V) overlaps a forward and a backward of different
# microbatches on one worker to hide each one's communication.
#
# Paper: DeepSeek-AI, "DeepSeek-V3 Technical Report" (2024), DualPipe; the
# V layout (one device, two chunks) as in DualPipeV and ZB-V (Qi et al.,
# "Pipeline Parallelism with Controllable Memory", 2024).
# S = 2W stages: worker v holds stage v (the "down" chunk) and stage
# 2W-1-v (the "up" chunk), so a microbatch's forward runs 0..W-1..0 and its
# backward back the same way. On worker v, the forward of the down chunk
# and the backward of the up chunk both take their inputs from worker v-1
# (and the other two from v+1): paired, they advance together, one tick per
# pair, instead of each waiting for the other's chain (compare
# 1f1b-overlap.pp, whose one-way pairs cost more than they save).
#
# The order: F(s,b) at tick 2b+s, B(s,b) at tick 2b+4W-1-s; on a worker, a
# tick holds at most one F and one B, of microbatches W apart, the B
# placed first. `overlap ... when b >= W` pairs exactly those: a forward
# has a backward in its tick when b >= W, and ppc pairs neighbours front to
# back. `cost overlap = P`: a pair takes max(tF, tB) + P% of min(tF, tB).
# With tF = 1, tB = 2, W = 4, B = 16 the makespan is 84 at P = 0, 99 at
# 50 and 114 at 100, against 108 for the same order without `overlap`.
#
# Parameters: -D W=workers -D B=microbatches -D P=percent.

param W = 4
param S = 2 * W
param B = 8
param P = 50

# constraints: a -D that breaks one fails the compile, saying which
require S == 2 * W, "worker v holds stages v and 2W-1-v: S must be 2W"

let v    = s < W ? s : 2 * W - 1 - s          # the worker of stage s
let tick = d == F ? 2 * b + s : 2 * b + 4 * W - 1 - s

compute(s,b,d)  = v
weights(s,b,d)  = v
priority(s,b,d) = 2 * tick + (d == F ? 1 : 0)
order strict
overlap F with B when b >= W
cost B = 2
cost overlap = P

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: S=2*W    # what ppc --search tries (compiler/README.md)
