# 1f1b-greedy.pp - 1F1B without writing its order: the seed's greedy rule,
# backward-first priority, and an inflight limit.
#
# Paper: as 1f1b.pp (PipeDream-Flush; Megatron's non-interleaved schedule).
# Worker s holds stage s. Backwards win every tie, and a worker may not start
# a forward while it holds S - s microbatches' activations, which is exactly
# the warm-up of S-1-s forwards and the one-forward-one-backward steady state:
# the same per-worker order as the strict 1f1b.pp (tested).
#
# Parameters: -D S=stages -D B=microbatches.

param S = 4
param B = 8
param W = S

# constraints: a -D that breaks one fails the compile, saying which
require W == S, "compute = s puts stage s on worker s: W must be S"

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == B ? b : B + b
limit inflight  = S - w
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: S=W    # what ppc --search tries (compiler/README.md)
