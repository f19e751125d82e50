# fsdp.pp - Fully Sharded Data Parallel: DDP's compute, weights sharded by stage.
#
# Paper: Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data
# Parallel" (VLDB 2023); the seed's w_FSDP(s,b,d) = (s, b) as (weights, compute):
# compute = b (worker b runs microbatch b end to end) and weights = s mod W
# (worker s is the source of truth of stage s; with more stages than workers
# they are dealt round-robin), so with S = W each worker fetches the S-1
# stages it does not own for each pass.
#
# Parameters: -D S=stages -D B=microbatches (default S).
# Each fetch is a FetchWeights/SendWeights pair in the plans, and a worker's
# gradients of a stage go back to its owner once its last job adding to them
# ends (compiler/README.md, "Weights and communication"); --keep-weights
# keeps fetched weights for later jobs.

param S = 4
param B = S
param W = B

# constraints: a -D that breaks one fails the compile, saying which
require W == B, "compute = b puts microbatch b on worker b: W must be B"

compute(s,b,d)  = b
weights(s,b,d)  = s % W
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: S=W    # what ppc --search tries (compiler/README.md)
