# breadth-first.pp - looped pipeline, breadth first: every microbatch passes a
# stage before any microbatch starts the next one on the same worker.
#
# Paper: Lamy-Poirier, "Breadth-First Pipeline Parallelism" (MLSys 2023).
# Stage s lives on worker s % W (S/W chunks per worker, as interleaved
# 1F1B). Forwards go stage by stage over all microbatches (GPipe-like within
# each loop), backwards likewise in reverse; this maximises the time to
# overlap data-parallel gradient reduction, at GPipe's activation memory.
#
# PyTorch's ScheduleLoopedBFS runs the backwards in falling microbatch
# order; looped-bfs.pp is that order. This file keeps the paper's rising
# order under the greedy rule, which its tests pin.
#
# Parameters: -D S -D B -D W.

param W = 4
param S = 8
param B = 8

# constraints: a -D that breaks one fails the compile, saying which
require W >= 1 && S % W == 0, "stage s runs on worker s % W: S must be a multiple of W"

compute(s,b,d)  = s % W
weights(s,b,d)  = s % W
priority(s,b,d) = d == F ? s * B + b : S * B + (S - 1 - s) * B + b
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: V=1..4 S=W*V    # what ppc --search tries (compiler/README.md)
