# 1f1b-offload.pp - 1F1B whose stashes wait in host memory between their
# forward and their backward (activation offloading), chosen per stage.
#
# Paper: Wan, Qi, Huang, Lin, Li, "PipeOffload: Improving Scalability of
# Pipeline Parallelism with Memory Optimization" (ICML 2025); 1F1B as in
# 1f1b.pp. `offload when EXPR` copies F(s,b)'s stash to host memory right
# after F, on a host-copy lane beside the worker's compute, and back before
# B(s,b): the plan issues the reload --prefetch jobs before B(s,b) (default
# the job right before it), so it overlaps that job. Worker s holds S-s stashes in
# 1F1B; offloaded, it keeps on the device only those whose copies are in
# flight, and its plan has a host pool for the others (ppvm allocates it
# at start-up; the report's `host` line and "host_bytes" give it).
#
# Stage s offloads when s < K: the last stage runs each B right after its
# F and holds one stash, so K = S-1 (the default) saves as much device
# memory as K = S without copies on the critical last worker. Each copy
# takes stash bytes / H time units on the lane (`cost host_bandwidth`):
# at the default H the demo model's stash (48.7 KiB) takes 0.25 units,
# and S = 4, B = 8 takes 22 as 1F1B does (every copy hides behind a job),
# for 97 KiB less on worker 0. Give measured costs ("host_bandwidth" in
# --costs, which ppvm --profile writes) to price the copies of a real
# machine; H = 0 makes them free. Trains to exactly
# the weights of K = 0 (the `offload_e2e` suite); --emit torch-csv
# refuses it (PyTorch's actions have no offload).
#
# Parameters: -D S=stages -D B=microbatches -D K=stages that offload
# -D H=host bandwidth (bytes per time unit, 0: free copies).

param S = 4
param B = 8
param W = S
param K = S - 1
param H = 200000

require W == S, "compute = s puts stage s on worker s: W must be S"
require K >= 0 && K <= S, "K counts stages: 0 <= K <= S"
require H >= 0, "H is a bandwidth: H >= 0"

let warm = S - 1 - s

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
order strict
offload when s < K
cost host_bandwidth = H

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: S=W K=0..S
