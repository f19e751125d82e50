# lpp.pp - Looped Pipeline Parallelism: G groups of R workers; each group
# runs whole microbatches through all S stages, looping over its R workers.
#
# Paper: the seed ("General Parallelism to Train Deep Nets"), after
# Narayanan et al. 2021 (looping placements): w_LPP(s,b,d) = (h(s,b), h(s,b))
# with h(s,b) = (R*b mod W) + (s mod R). Microbatch b goes to group b mod G;
# worker g*R + j holds stages j, j+R, j+2R, ... as a replica of the same
# stages in every other group, so those replicas all-reduce their gradients.
# G = 1 is GPipe (h = s); R = 1 is DDP (h = b) -- both tested on the orders.
#
# Parameters: -D S -D B -D G -D R.

param S = 4
param B = 8
param G = 2
param R = 2
param W = G * R

# constraints: a -D that breaks one fails the compile, saying which
require W == G * R, "G groups of R workers: give W = G * R"
require R >= 1 && S % R == 0, "each group loops over its R workers: S must be a multiple of R"

let h = (R * b) % W + s % R

compute(s,b,d)  = h
weights(s,b,d)  = h
priority(s,b,d) = d * B + b
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: G=1..W R=W/G S=W    # what ppc --search tries (compiler/README.md)
