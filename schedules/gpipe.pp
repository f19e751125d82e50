# gpipe.pp - GPipe: one worker per stage, all forwards, then all backwards.
#
# Paper: Huang et al., "GPipe: Efficient Training of Giant Neural Networks
# using Pipeline Parallelism" (2019); the seed's w_GPipe(s,b,d) = (s, s).
# Worker s computes stage s for every microbatch and holds its weights, so
# activations cross workers (2B receives on interior workers) and no weights
# move. Bubble (p-1)/(m+p-1) with unit costs; peak activations B per worker.
#
# Parameters: -D S=stages -D B=microbatches.

param S = 4
param B = 8
param W = S

# constraints: a -D that breaks one fails the compile, saying which
require W == S, "compute = s puts stage s on worker s: W must be S"

compute(s,b,d)  = s
weights(s,b,d)  = s
# forwards first (in microbatch order), then backwards in microbatch order
priority(s,b,d) = d * B + b
order greedy

model {
    context = 8     # bytes of context per sample
    embed   = 16    # per-byte embedding: hidden width 128
    ffn     = 256   # inner width of each residual MLP block
    blocks  = 1     # residual MLP blocks per stage
    batch   = 16    # samples per microbatch
}

# search: S=W    # what ppc --search tries (compiler/README.md)
