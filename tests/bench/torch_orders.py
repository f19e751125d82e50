#!/usr/bin/env python3
"""torch_orders.py - the reference implementations' per-rank compute orders,
written once as golden data for the `orders` suite (tests/unit/test_library_orders.c).

PyTorch's torch.distributed.pipelining schedules compute their whole
pipeline_order (every rank's list of actions) in the constructor, from the
stage count, the rank count and the microbatch count alone. Their
constructors also want real stages and a process group, so this script
builds each schedule object without running __init__ (object.__new__) and
sets exactly the attributes the constructor would have set before it
computes the order, then calls the same methods the constructor calls
(_calculate_single_rank_operations, and _add_bubbles_to_actions for
ScheduleInterleavedZeroBubble): the order is PyTorch's own code's output,
with no fake process group or stage needed.

Megatron-Core's interleaved order is not in PyTorch: megatron_interleaved()
below transcribes its published algorithm (get_schedule_table and
forward_backward_pipelining_with_interleaving in
megatron/core/pipeline_parallel/schedules.py) for a group size G
(microbatch_group_size_per_vp_stage; Megatron's default is the pipeline
size W, and it accepts only W <= G <= B with B mod G either 0 or >= W, so a
B that W does not divide needs a larger G). Where PyTorch's
ScheduleInterleaved1F1B groups the same way (G = W dividing B) the two must
agree, and the script checks that they do before writing anything.

Output: tests/golden/torch-orders/<schedule>-W<w>-V<v>-B<b>[-G<g>].txt, one line
per rank after a header:
    # <reference and version>; <command>
    rank 0: F(0,0) F(0,1) ... I(4,0) W(4,0) ... B(0,7)
F = forward, I = backward for the input (PyTorch's BACKWARD_INPUT), W =
backward for the weights, B = full backward; (stage, microbatch). Idle slots
(None) are dropped; DualPipeV's overlapped forward+backward pairs
(OVERLAP_F_B) are written as their two actions in brackets, forward first,
e.g. [F(0,3) B(3,1)].

It also writes tests/golden/torch-csv/torch-dualpipev-W4-B10.csv,
ScheduleDualPipeV's own _dump_csv(format="compute_only") of that order
(overlapped pairs as (F;B)OVERLAP_F_B cells), for the torch_csv suite.

Run: make torch-orders (needs /work/venv/torchenv or TORCH_PYTHON).
"""
import os
import sys

import torch
from torch.distributed.pipelining import schedules as S

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "torch-orders")
COMMAND = "make torch-orders (tests/bench/torch_orders.py)"


def _flatten(actions):
    """Compute actions in order, Nones dropped; an OVERLAP_F_B action is a
    tuple of its parts (PyTorch's order: forward, then backward)."""
    out = []
    for a in actions:
        if a is None:
            continue
        if a.computation_type == S.OVERLAP_F_B:
            out.append(tuple(_flatten(a.sub_actions)))
            continue
        out.append((str(a.computation_type.value), a.stage_index, a.microbatch_index))
    return out


def _action(a):
    """F(s,b); an overlapped pair as [F(s,b) B(s,b)]."""
    if isinstance(a[0], tuple):
        return "[" + " ".join(_action(x) for x in a) + "]"
    return "%s(%d,%d)" % a


def _bare(cls, W, V, B):
    """A schedule object with the attributes its constructor sets before
    computing pipeline_order (see each class's __init__ in schedules.py)."""
    sch = object.__new__(cls)
    sch.pp_group_size = W
    sch._n_microbatches = B
    sch._num_stages = W * V
    sch.num_stages = W * V
    sch.n_local_stages = V
    sch._stages = [None] * V  # only len() is read
    sch.pipeline_order = {}
    return sch


def _rounds(sch, W, B):
    sch.number_of_rounds = max(1, B // W)
    sch.microbatches_per_round = B // sch.number_of_rounds
    return B % sch.number_of_rounds == 0  # the constructors' own condition


def torch_order(name, W, V, B):
    """{rank: [(kind, stage, mb)]} for PyTorch schedule `name`, or None where
    its constructor would refuse the shape."""
    cls = getattr(S, name)
    sch = _bare(cls, W, V, B)
    if name in ("ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble"):
        if not _rounds(sch, W, B):
            return None
    if name in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV") and V != 2:
        return None
    if name == "ScheduleDualPipeV" and B < W * V:
        return None
    for r in range(W):
        sch.rank = r
        sch.pipeline_order[r] = sch._calculate_single_rank_operations(r)
    if name == "ScheduleInterleavedZeroBubble":
        sch.pipeline_order = sch._add_bubbles_to_actions(W * V)
    return {r: _flatten(sch.pipeline_order[r]) for r in range(W)}


def megatron_schedule_table(B, V, G):
    """Megatron-Core's get_schedule_table: virtual microbatch id ->
    (microbatch, chunk); microbatches in groups of G, chunk by chunk, the last
    group taking whatever is left."""
    table = []
    for lo in range(0, B, G):
        hi = B if lo + G >= B else lo + G
        table.extend((mb, c) for c in range(V) for mb in range(lo, hi))
    return table


def megatron_interleaved(W, V, B, G):
    """Megatron-Core's forward_backward_pipelining_with_interleaving, compute
    order only: rank r runs (W-r-1)*2 + (V-1)*G warm-up forwards (at most
    B*V), then one forward and one backward (the backward of virtual id i
    runs chunk V-1-chunk(i) on microbatch(i)), then the remaining backwards.
    None where Megatron raises: G outside [W, B], or 0 < B mod G < W."""
    if G < W or G > B or 0 < B % G < W:
        return None
    table = megatron_schedule_table(B, V, G)
    total = B * V
    order = {}
    for r in range(W):
        warm = min((W - r - 1) * 2 + (V - 1) * G, total)
        fwd = lambda k: ("F", table[k][1] * W + r, table[k][0])
        bwd = lambda k: ("B", (V - 1 - table[k][1]) * W + r, table[k][0])
        ops = [fwd(k) for k in range(warm)]
        for i in range(total - warm):
            ops.append(fwd(warm + i))
            ops.append(bwd(i))
        ops.extend(bwd(i) for i in range(total - warm, total))
        order[r] = ops
    return order


def write(fname, header, order):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, fname), "w") as f:
        f.write("# %s; generated by %s\n" % (header, COMMAND))
        for r in sorted(order):
            f.write("rank %d: %s\n" % (r, " ".join(_action(a) for a in order[r])))


# The grid: (W, V, B) shapes per schedule, with B not a multiple of W and
# B < W wherever the reference accepts them.
GRID = {
    "ScheduleInterleaved1F1B": [(2, 2, 4), (4, 2, 8), (4, 2, 12), (4, 3, 8), (2, 2, 3),
                                (4, 2, 6), (4, 2, 10), (4, 2, 3), (3, 2, 5), (4, 2, 2)],
    "ScheduleLoopedBFS": [(2, 2, 4), (4, 2, 8), (4, 2, 6), (4, 2, 3), (3, 3, 4), (4, 1, 5)],
    "ScheduleInterleavedZeroBubble": [(2, 2, 4), (4, 2, 8), (4, 2, 12), (4, 3, 8), (4, 2, 6),
                                      (4, 2, 10), (4, 2, 3), (4, 1, 8), (3, 2, 5)],
    "ScheduleZBVZeroBubble": [(2, 2, 4), (4, 2, 8), (4, 2, 12), (4, 2, 6), (4, 2, 7),
                              (4, 2, 3), (3, 2, 5), (2, 2, 2)],
    "ScheduleDualPipeV": [(2, 2, 4), (2, 2, 5), (2, 2, 6), (3, 2, 6), (3, 2, 7), (4, 2, 8),
                          (4, 2, 9), (4, 2, 10), (4, 2, 12)],
}
FILES = {
    "ScheduleInterleaved1F1B": "interleaved-1f1b",
    "ScheduleLoopedBFS": "looped-bfs",
    "ScheduleInterleavedZeroBubble": "interleaved-zb",
    "ScheduleZBVZeroBubble": "zb-v",
    "ScheduleDualPipeV": "dualpipev",
}
# Megatron's (W, V, B, G): G = W where W divides B, else a G it accepts.
MEGATRON = [(2, 2, 4, 2), (4, 2, 8, 4), (4, 2, 12, 4), (4, 3, 8, 4), (4, 2, 6, 6),
            (4, 2, 10, 5), (4, 2, 10, 6), (3, 2, 7, 4), (4, 3, 9, 9), (2, 2, 5, 3),
            (4, 2, 14, 5)]


# DualPipeV's own CSV (tests/golden/torch-csv, the torch_csv suite compares
# ppc --emit torch-csv with it): the bare schedule's _dump_csv, overlapped
# pairs as PyTorch writes them, (F;B)OVERLAP_F_B.
DUALPIPEV_CSV = [(4, 10)]
CSV_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "torch-csv")


def write_dualpipev_csv(W, B):
    sch = _bare(S.ScheduleDualPipeV, W, 2, B)
    for r in range(W):
        sch.rank = r
        sch.pipeline_order[r] = sch._calculate_single_rank_operations(r)
    path = os.path.join(CSV_OUT, "torch-dualpipev-W%d-B%d.csv" % (W, B))
    sch._dump_csv(path, format="compute_only")
    return path


def main():
    version = "torch " + torch.__version__
    written = 0
    for W, B in DUALPIPEV_CSV:
        print("torch_orders: wrote %s" % os.path.normpath(write_dualpipev_csv(W, B)))
    for name, shapes in GRID.items():
        for W, V, B in shapes:
            order = torch_order(name, W, V, B)
            if order is None:
                sys.exit("torch_orders: %s refuses W=%d V=%d B=%d; fix the grid" % (name, W, V, B))
            write("%s-W%d-V%d-B%d.txt" % (FILES[name], W, V, B),
                  "PyTorch %s (%s) W=%d V=%d B=%d" % (name, version, W, V, B), order)
            written += 1
    for W, V, B, G in MEGATRON:
        order = megatron_interleaved(W, V, B, G)
        if order is None:
            sys.exit("torch_orders: Megatron refuses W=%d V=%d B=%d G=%d; fix the grid" % (W, V, B, G))
        if G == W and B % W == 0:
            # where both are defined alike they must agree
            if order != torch_order("ScheduleInterleaved1F1B", W, V, B):
                sys.exit("torch_orders: Megatron and PyTorch disagree at W=%d V=%d B=%d" % (W, V, B))
        write("megatron-interleaved-W%d-V%d-B%d-G%d.txt" % (W, V, B, G),
              "Megatron-Core forward_backward_pipelining_with_interleaving, "
              "microbatch_group_size_per_vp_stage=G, transcribed in torch_orders.py "
              "(checked against %s's ScheduleInterleaved1F1B where G = W divides B) "
              "W=%d V=%d B=%d G=%d" % (version, W, V, B, G), order)
        written += 1
    print("torch_orders: wrote %d files under %s" % (written, os.path.normpath(OUT)))


if __name__ == "__main__":
    main()
