# pp-fsdp.pp - a 1F1B pipeline whose stages are FSDP-sharded across a group.
#
# Paper: the 2-D composition of pipeline parallelism with Zhao et al.,
# "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel"
# (VLDB 2023), as torchtitan and PyTorch's pipelining (pipeline stages
# wrapped in FSDP) run it.
# W = P * D workers in P groups of D. The model has S = P * D stages;
# pipeline stage p is the model stages p*D .. p*D + D-1 and lives on group
# p = workers p*D .. p*D + D-1, FSDP-sharded: worker s owns model stage s
# (its shard), and every worker of the group runs every stage of the group
# for its own microbatches, fetching the shards it does not own from their
# owners (FetchWeights / SendWeights) and returning their gradients to them.
# Microbatch b goes to member b mod D of each group, as its (b / D)-th
# microbatch; the groups form a 1F1B pipeline over those microbatches (the
# D model stages of one pipeline stage run back to back: they share a
# priority, and the tie rule runs forwards by rising and backwards by
# falling stage).
#
# Groups: ownership group p = {p*D .. p*D + D-1}: model stage s is owned by
# worker s and fetched by the D-1 others of its group; a microbatch's
# activations move from member m of group p to member m of group p+1.
#
# Closed forms (unit costs per model stage): each member runs 1F1B over P
# pipeline stages and B/D microbatches, so the bubble is (P-1)/(B/D + P-1) of
# the step; a member of group p holds at most min(P - p, B/D) microbatches'
# activations (each D model stages deep) and fetches D-1 shards per pass.
#
# Parameters: -D P=pipeline stages -D D=group size -D B=microbatches.

param P = 2
param D = 2
param B = 4
param S = P * D
param W = S

# constraints: a -D that breaks one fails the compile, saying which
require S == P * D && W == S, "P groups of D workers, one model stage each: S and W must be P * D"
require D >= 1 && B % D == 0, "microbatch b goes to member b mod D of each group: B must be a multiple of D"

let p    = s / D                # the pipeline stage (group) of model stage s
let m    = b / D                # b's index among its member's microbatches
let warm = P - 1 - p

compute(s,b,d)  = p * D + b % D
weights(s,b,d)  = s
priority(s,b,d) = d == F ? (m <= warm ? m : 2 * m - warm) : warm + 1 + 2 * m
order strict

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: P=1..W D=W/P    # what ppc --search tries (compiler/README.md)
