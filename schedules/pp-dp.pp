# pp-dp.pp - PP x DP: a 1F1B pipeline replicated over D data-parallel groups.
#
# Paper: Narayanan et al., "Efficient Large-Scale Language Model Training on
# GPU Clusters Using Megatron-LM" (SC 2021), section 2.3 (pipeline model
# parallelism combined with data parallelism); Megatron's and PyTorch's 2-D
# device mesh (pp x dp).
# W = S * D workers in D pipeline replicas: replica g is workers
# g*S .. g*S + S-1, worker g*S + s holds stage s. Microbatch b goes to
# replica b mod D, as its (b / D)-th microbatch, and each replica runs 1F1B
# (1f1b.pp) on its own microbatches.
#
# Groups: stage s lives on the D workers {g*S + s : g < D} (its replica
# group); each of them computes a gradient from its own microbatches, and
# the plans all-reduce those D gradients every step (weights() has D values
# for the stage: DDP's replicas, see compiler/README.md). Pipeline group g is
# {g*S .. g*S + S-1}: the activations and gradients of its microbatches move
# only inside it.
#
# Closed forms (unit costs): each replica is 1F1B over B/D microbatches:
# bubble (S-1)/(B/D + S-1) of the step, worker g*S + s holds at most
# min(S - s, B/D) microbatches' activations, plus the all-reduce of each
# stage's gradient over D workers.
#
# Parameters: -D S=stages -D D=replicas -D B=microbatches.

param S = 4
param D = 2
param B = 8
param W = S * D

# constraints: a -D that breaks one fails the compile, saying which
require W == S * D, "D replicas of an S-stage pipeline: W must be S * D"
require D >= 1 && B % D == 0, "microbatch b goes to replica b mod D: B must be a multiple of D"

let g    = b % D                # the replica
let m    = b / D                # b's index among its replica's microbatches
let warm = S - 1 - s

compute(s,b,d)  = g * S + s
weights(s,b,d)  = g * S + s
priority(s,b,d) = d == F ? (m <= warm ? m : 2 * m - warm) : warm + 1 + 2 * m
order strict

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: D=1..W S=W/D    # what ppc --search tries (compiler/README.md)
