# fslpp.pp - Fully Sharded Looped Pipeline Parallelism (the seed's hybrid).
#
# Paper: the seed, w_FSLPP(s,b,d) = (h(s,b), h(s,s)) with LPP's
# h(s,b) = (R*b mod W) + (s mod R): compute loops as in lpp.pp, but stage s's
# weights live on one worker, h(s,s), and the other groups fetch them. With
# G = R no worker owns more than one stage's weights when S <= W.
#
# Parameters: -D S -D B -D G -D R.
# Each fetch is a FetchWeights/SendWeights pair in the plans, and a worker's
# gradients of a stage go back to its owner once its last job adding to them
# ends (compiler/README.md, "Weights and communication"); --keep-weights
# keeps fetched weights for later jobs.

param S = 4
param B = 8
param G = 2
param R = 2
param W = G * R

# constraints: a -D that breaks one fails the compile, saying which
require W == G * R, "G groups of R workers: give W = G * R"
require R >= 1 && S % R == 0, "each group loops over its R workers: S must be a multiple of R"

compute(s,b,d)  = (R * b) % W + s % R
weights(s,b,d)  = (R * s) % W + s % R
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
