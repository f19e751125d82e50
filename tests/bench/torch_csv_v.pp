# torch_csv_v.pp - a V-shaped placement for `make torch-csv-check`
# (tests/bench/torch_csv_run.py): 2W stages, stage s on worker s for s < W
# and on worker 2W-1-s after, so worker 0 holds the first and the last
# stage and worker W-1 the two middle ones, which PyTorch's runtime hands
# from one to the other without a transfer (its "V-schedule special
# case"), as ZB-V's placement does. Split backward, greedy order, earliest
# microbatch first. Not a library schedule: it exists to show that a
# V-shaped pp schedule loads and trains in PyTorch.

param W = 4
param S = 2 * W
param B = 8

split backward

let v = s < W ? s : 2 * W - 1 - s

compute(s,b,d)  = v
weights(s,b,d)  = v
priority(s,b,d) = b
