# interleaved-1f1b.pp - Megatron-LM's interleaved 1F1B: V model chunks per worker.
#
# Paper: Narayanan et al., "Efficient Large-Scale Language Model Training on
# GPU Clusters Using Megatron-LM" (SC 2021), section 2.2.2; the order is that
# of forward_backward_pipelining_with_interleaving in Megatron-Core.
# The model has S = W * V stages; stage s lives on worker s % W (chunk s / W),
# so a microbatch loops V times through the workers. Worker r runs
# 2(W-r-1) + (V-1)W warm-up forwards (at most B*V), then alternates one
# forward and one backward. Bubble about (W-1)/(V*B + W-1).
#
# Jobs are numbered as Megatron numbers them: within each group of W
# microbatches, chunk by chunk (backwards visit the chunks in reverse);
# forward k sits at k in warm-up and at 2k - warm after it, backward i at
# warm + 2i + 1.
#
# Constraints: B a multiple of W.   Parameters: -D W=workers -D V=chunks -D B=microbatches.

param W = 4
param V = 2
param B = 8
param S = W * V

let chunk = s / W
let r     = s % W
let warm  = min(2 * (W - r - 1) + (V - 1) * W, B * V)
let kf    = (b / W) * W * V + chunk * W + b % W
let kb    = (b / W) * W * V + (V - 1 - chunk) * W + b % W

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
