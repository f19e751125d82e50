# ddp.pp - Distributed Data Parallel: one worker per microbatch.
#
# Paper: Li et al., "PyTorch Distributed: Experiences on Accelerating Data
# Parallel Training" (VLDB 2020); the seed's w_DDP(s,b,d) = (b, b).
# Worker b runs every stage of microbatch b and holds a replica of every
# stage's weights, so no activations move; at the end of the step each
# stage's gradients are all-reduced among the W replicas.
#
# Parameters: -D S=stages -D B=microbatches.

param S = 4
param B = 4
param W = B

# constraints: a -D that breaks one fails the compile, saying which
require W == B, "compute = b puts microbatch b on worker b: W must be B"

compute(s,b,d)  = b
weights(s,b,d)  = b
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: S=W    # what ppc --search tries (compiler/README.md)
