# 1f1b-bubble-recompute.pp - 1F1B whose re-run forwards go into the
# pipeline's bubbles (Mario's placement) instead of right before their
# backwards.
#
# Paper: Liu et al., "Mario: Near Zero-cost Activation Checkpointing in
# Pipeline Parallelism" (PPoPP 2025); 1F1B as in 1f1b.pp.
# After its warm-up forwards F0 .. F(warm), worker s waits `warm` units
# for the first gradient to come back down the pipeline. The priority
# names R (`d == R`), so it is evaluated for the re-run forwards: the
# first P of them (b < P, default warm) go into that wait, right after the
# warm-up; the others run right before their backward, as in
# 1f1b-recompute.pp. Priorities are doubled so that an R fits between two
# neighbours of 1F1B's order. The last stage (no bubble, one stash)
# does not recompute. A re-run in the bubble costs no time but holds its
# rebuilt stash until its backward: memory traded back for time.
#
# Parameters: -D S=stages -D B=microbatches -D P=re-runs per worker put
# into its warm-up bubble (capped at warm).

param S = 4
param B = 8
param W = S
param P = S

require W == S, "compute = s puts stage s on worker s: W must be S"
require P >= 0, "P counts re-run forwards: P >= 0"

let warm = S - 1 - s
let fb = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
let early = b < min(P, warm)

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == R ? (early ? 2 * warm + 1 : 2 * (warm + 1 + 2 * b) - 1) : 2 * fb
order strict
recompute when s < S - 1

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: S=W P=0..S
