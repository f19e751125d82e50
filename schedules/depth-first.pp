# depth-first.pp - looped pipeline, depth first: each microbatch goes as deep
# as it can before the next one starts.
#
# Paper: Lamy-Poirier, "Breadth-First Pipeline Parallelism" (MLSys 2023),
# which names this the depth-first schedule (Megatron's interleaving without
# its 1F1B warm-up rule). Stage s lives on worker s % W; among ready jobs
# the earliest microbatch wins, backwards first, so activations are freed
# as soon as possible.
#
# Parameters: -D S -D B -D W.

param W = 4
param S = 8
param B = 8

# constraints: a -D that breaks one fails the compile, saying which
require W >= 1 && S % W == 0, "stage s runs on worker s % W: S must be a multiple of W"

compute(s,b,d)  = s % W
weights(s,b,d)  = s % W
priority(s,b,d) = d == B ? b * S + (S - 1 - s) : S * B + b * S + s
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: V=1..4 S=W*V    # what ppc --search tries (compiler/README.md)
