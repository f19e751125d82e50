# 1f1b-recompute.pp - 1F1B with activation recomputation (Megatron-LM's
# full recompute, `recompute_granularity=full`), chosen per stage.
#
# Paper: Chen et al., "Training Deep Nets with Sublinear Memory Cost"
# (2016); Korthikanti et al., "Reducing Activation Recomputation in Large
# Transformer Models" (2022), Megatron-LM's recompute_method=uniform.
# `recompute when EXPR` makes F(s,b) keep only its input; a job R(s,b)
# re-runs the forward on B's worker to rebuild the stash before B(s,b).
# Written without `d == R` in the priority, R takes its backward's
# priority and runs right before it (Megatron's placement): worker s then
# holds one stash at a time plus S-s kept inputs, instead of S-s stashes,
# and pays one forward more per microbatch.
#
# Stage s recomputes when s < K: the last stage holds a single stash in
# 1F1B anyway, so K = S-1 (the default) saves as much memory as K = S and
# keeps the critical last worker at F + B per microbatch.
#
# Parameters: -D S=stages -D B=microbatches -D K=stages that recompute.

param S = 4
param B = 8
param W = S
param K = S - 1

require W == S, "compute = s puts stage s on worker s: W must be S"
require K >= 0 && K <= S, "K counts stages: 0 <= K <= S"

let warm = S - 1 - s

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
order strict
recompute when s < K

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: S=W K=0..S
