# zb-h2.pp - Zero Bubble ZB-H2: ZB-H1 with more warm-up forwards, a smaller
# bubble for more activation memory.
#
# Paper: Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism"
# (ICLR 2024), section 3.1 and Figure 3 (ZB-H2): "add extra F passes during
# the warm-up phase to fill the bubble preceding the initial B", and
# "reorder the W passes at the tail, which changes the layout from
# trapezoid into parallelogram". Written with the paper's rules rather than
# a table of slots (no reference implementation ships ZB-H2's order):
#   - worker r may hold 2(S-r)-1 microbatches between F and B (the paper's
#     memory, (2p-1) M_B on the first worker, against ZB-H1's p M_B), so its
#     warm-up runs 2(S-r)-1 forwards where ZB-H1 runs S-r;
#   - among the jobs that can start earliest, backwards (B: the input
#     gradient, on the critical path) go first, then forwards, and the
#     weight gradients (W) fill whatever is left: at the tail the B's run
#     back to back and the W's follow, the parallelogram.
# The greedy rule (`order greedy`, `limit inflight`) finds that order.
#
# Closed forms (B >= 2S-1 and T_B <= T_F + T_W; the sim suite checks them
# for several costs; beyond, e.g. T_B = 3 T_F = 3 T_W, the B chain of the
# tail adds idle time: S = 4, B = 12 gives 66, not 63):
#   makespan B(T_F + T_B + T_W) + (S-1) T_F: the only idle time is the
#   pipeline's start skew (worker r starts at r T_F and, in the parallelogram,
#   ends (S-1-r) T_F before the last), against ZB-H1's (S-1)(T_F + T_B - T_W);
#   the same as ZB-H1 when T_B = T_W, smaller when T_B > T_W (T_F = T_W = 1,
#   T_B = 2, S = 4, B = 8: 35 against 38). The paper's (p-1)(T_F + T_B - 2T_W)
#   counts the skew out, as its optimizer post-validation lets the next
#   step's parallelogram fill it; a synchronous step, as here, keeps it.
#   Worker r holds at most 2(S-r)-1 microbatches' activations between F and B.
#
# Parameters: -D S=stages -D B=microbatches.

param S = 4
param B = 8
param W = S

# constraints: a -D that breaks one fails the compile, saying which
require W == S, "compute = s puts stage s on worker s: W must be S"

split backward

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == B ? b : d == F ? B + b : 2 * B + b
limit inflight  = 2 * (S - w) - 1
order greedy

model {
    context = 8
    embed   = 16
    ffn     = 256
    blocks  = 1
    batch   = 16
}
# search: S=W    # what ppc --search tries (compiler/README.md)
