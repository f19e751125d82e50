# 1f1b.pp - one-forward-one-backward (PipeDream-Flush / DeepSpeed / Megatron),
# written as a strict order.
#
# Paper: Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training"
# (PipeDream-2BW/Flush, 2021); Megatron-LM's non-interleaved schedule.
# Worker s holds stage s (as GPipe) but after a warm-up of S-1-s forwards
# alternates one forward with one backward, so it never holds more than
# min(S-s, B) microbatches' activations instead of B. Same bubble as GPipe:
# (S-1)/(B+S-1) with unit costs.
#
# The order on worker s is F0 .. F(warm), B0, F(warm+1), B1, ... : forward b
# sits at position b during warm-up and 2b - warm after it; backward b at
# warm + 1 + 2b.
#
# Parameters: -D S=stages -D B=microbatches.

param S = 4
param B = 8
param W = S

# constraints: a -D that breaks one fails the compile, saying which
require W == S, "compute = s puts stage s on worker s: W must be S"

let warm = S - 1 - s

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
order strict

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: S=W    # what ppc --search tries (compiler/README.md)
