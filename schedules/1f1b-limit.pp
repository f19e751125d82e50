# 1f1b-limit.pp - 1F1B with its inflight limit moved by K: fewer microbatches
# held, for less memory (K < 0), or more, for a longer warm-up that hides
# transfer latency (K > 0).
#
# Paper: as 1f1b-greedy.pp (Narayanan et al. 2021, PipeDream-Flush;
# Megatron's non-interleaved schedule), whose order this is at K = 0.
# Worker w may hold S - w + K microbatches' activations (from F to B), at
# least 1 and at most B; backwards win ties, as in 1F1B. K = 1 - S holds
# one microbatch on every worker (the least memory, a pipeline that never
# fills); K > 0 lets a worker run ahead of its backwards when they are late,
# which is what a measured latency asks for (`ppc --search --costs`).
#
# Constraints: W = S.   Parameters: -D S -D B -D K (any integer).

param S = 4
param B = 8
param W = S
param K = 0

require W == S, "compute = s puts stage s on worker s: W must be S"

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == B ? b : B + b
limit inflight  = max(1, min(S - w + K, B))
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}

# search: S=W K=1-W..W    # what ppc --search tries (compiler/README.md)
