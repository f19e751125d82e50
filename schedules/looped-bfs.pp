# looped-bfs.pp - PyTorch's ScheduleLoopedBFS: looped breadth-first pipeline.
#
# Paper: Lamy-Poirier, "Breadth-First Pipeline Parallelism" (MLSys 2023);
# the order is that of torch.distributed.pipelining.ScheduleLoopedBFS
# (_calculate_single_rank_operations). Stage s lives on worker s % W (V =
# S / W chunks per worker). Each worker runs its chunks' forwards chunk by
# chunk, every microbatch in rising order, then its backwards chunk by chunk
# in reverse, every microbatch in FALLING order (the last microbatch's
# backward first: it is the one whose forward finished last). The orders
# suite compares it with PyTorch's per-rank order.
#
# Why a file beside breadth-first.pp: that one is greedy and runs backwards
# in rising microbatch order (the paper's figure); this one is PyTorch's
# strict order, which users of ScheduleLoopedBFS get.
#
# Closed forms (unit costs, T_F = T_B = 1): every worker holds all V*B
# microbatch-chunks' activations at the turn (GPipe's memory per chunk);
# makespan 2VB + 2(W-1) when B >= W (each loop's forwards keep the workers
# busy; the fill and drain cost W-1 each).
#
# Parameters: -D W -D V -D B.

param W = 4
param V = 2
param B = 8
param S = W * V

# constraints: a -D that breaks one fails the compile, saying which
require V >= 1 && S == W * V, "stage s lives on worker s % W as chunk s / W: S must be W * V, V >= 1"

let chunk = s / W

compute(s,b,d)  = s % W
weights(s,b,d)  = s % W
priority(s,b,d) = d == F ? chunk * B + b : V * B + (V - 1 - chunk) * B + (B - 1 - b)
order strict

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: V=1..4    # what ppc --search tries (compiler/README.md)
