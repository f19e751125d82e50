# gpu_wide.pp - the GPU benchmark's schedule (tests/bench/gpu_bench.sh): the
# demo model at a width that fills a GPU (hidden 4096, inner 16384), two
# stages of two blocks each, four microbatches of 256 samples, all on one
# rank: what a single GPU sustains on this model, to set beside PyTorch
# eager and cuBLAS's GEMM rate at the same shapes.
param S = 2
param B = 4
param W = 1

compute(s,b,d)  = 0
weights(s,b,d)  = 0
priority(s,b,d) = d * B + b
order greedy

model {
    context = 16    # hidden width 16 * 256 = 4096
    embed   = 256
    ffn     = 16384
    blocks  = 2
    batch   = 256
}
