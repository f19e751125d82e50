# breadth-first.pp - looped pipeline, breadth first: every microbatch passes a
# stage before any microbatch starts the next one on the same worker.
#
# Paper: Lamy-Poirier, "Breadth-First Pipeline Parallelism" (MLSys 2023).
# Stage s lives on worker s % W (S/W chunks per worker, as interleaved
# 1F1B). Forwards go stage by stage over all microbatches (GPipe-like within
# each loop), backwards likewise in reverse; this maximises the time to
# overlap data-parallel gradient reduction, at GPipe's activation memory.
#
# Constraints: S a multiple of W.   Parameters: -D S -D B -D W.

param W = 4
param S = 8
param B = 8

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
