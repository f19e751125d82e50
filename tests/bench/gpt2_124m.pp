# gpt2_124m.pp - GPT-2 124M (12 layers, width 768, 12 heads, context 1024,
# the vocabulary 50257 padded to 50304, a multiple of 128, as llm.c and
# nanoGPT pad it) trained with 1F1B: the model of make gpu-bench-gpt
# (tests/bench/gpt_bench.sh). S = 1 is one rank holding the whole model
# (B microbatches accumulated per step); S = 2 and 4 split the 12 layers
# evenly, the embeddings on stage 0 and the head on the last.
#
# Parameters: -D S=stages -D B=microbatches.

param S = 1
param B = 4
param W = S

require W == S, "compute = s puts stage s on worker s: W must be S"
require 12 % S == 0, "the 12 layers split evenly: S must divide 12"

let warm = S - 1 - s

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
order strict
optimizer adamw
precision bf16

model gpt {
    vocab   = 50304
    context = 1024
    embed   = 768
    heads   = 12
    ffn     = 3072
    layers  = 12 / S
    batch   = 8
}
