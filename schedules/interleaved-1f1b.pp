# interleaved-1f1b.pp - Megatron-LM's interleaved 1F1B: V model chunks per worker.
#
# Paper: Narayanan et al., "Efficient Large-Scale Language Model Training on
# GPU Clusters Using Megatron-LM" (SC 2021), section 2.2.2; the order is that
# of forward_backward_pipelining_with_interleaving in Megatron-Core (its
# get_schedule_table), for any number of microbatches B.
# The model has S = W * V stages; stage s lives on worker s % W (chunk s / W),
# so a microbatch loops V times through the workers.
#
# Order. Microbatches go in groups of G (Megatron's
# microbatch_group_size_per_vp_stage); within a group, chunk by chunk; the
# last group takes whatever is left (when G does not divide B, a group of
# B mod G). Forwards are numbered k in that order; backwards i likewise
# with the chunks reversed. Worker r runs warm = 2(W-r-1) + (V-1)G warm-up
# forwards (at most B*V), then alternates one forward and one backward, then
# the remaining backwards: forward k sits at k in warm-up and at 2k - warm
# after it, backward i at warm + 2i + 1.
# The default G is PyTorch's ScheduleInterleaved1F1B's round size
# B / max(1, B/W) where that divides B (PyTorch refuses other B), else B (one
# group). Every default is an order a reference runs: PyTorch's wherever
# PyTorch accepts B (including B < W), and Megatron-Core's with -D G=<that G>
# for every B >= W (Megatron accepts W <= G <= B with B mod G = 0 or >= W;
# its default G = W is this default whenever W divides B). Before this
# header said "B a multiple of W", B = 6 on W = 4 silently grouped 4 + 2, an
# order Megatron refuses (a last group smaller than W) and PyTorch does not
# run.
# The orders suite compares both against the references' per-rank orders
# (tests/golden/torch-orders/).
#
# Closed forms (T_F = T_B, unit costs): bubble (W-1)/(V*B + W-1) of the
# step when G divides B; worker r holds at most warm + 1 microbatch-chunks'
# activations (worker 0: 2(W-1) + (V-1)G + 1).
#
# Constraints (the require lines below): S = W * V; 1 <= G <= B. For
# Megatron's order also G >= W and B mod G = 0 or >= W, which Megatron checks
# itself; a smaller last group can deadlock the strict order (W = 4, V = 3,
# B = 9, G = 4 does, and ppc says so).
# Parameters: -D W=workers -D V=chunks -D B=microbatches -D G=group size.

param W = 4
param V = 2
param B = 8
param R = max(1, B / W)                  # PyTorch's rounds
param G = B % R == 0 ? B / R : B         # microbatches per group
param S = W * V

# constraints: a -D that breaks one fails the compile, saying which
require S == W * V, "stage s lives on worker s % W as chunk s / W: S must be W * V"
require G >= 1 && G <= B, "microbatches go in groups of G: G must be in [1, B]"

let chunk = s / W
let r     = s % W
let warm  = min(2 * (W - r - 1) + (V - 1) * G, B * V)
let m0    = (b / G) * G                      # first microbatch of b's group
let gs    = m0 + G >= B ? B - m0 : G         # the group's size (the last may be short)
let kf    = m0 * V + chunk * gs + b - m0
let kb    = m0 * V + (V - 1 - chunk) * gs + b - m0

compute(s,b,d)  = s % W
weights(s,b,d)  = s % W
priority(s,b,d) = d == F ? (kf < warm ? kf : 2 * kf - warm) : warm + 2 * kb + 1
order strict

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: V=1..4    # what ppc --search tries (compiler/README.md)
