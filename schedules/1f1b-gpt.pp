# 1f1b-gpt.pp - 1F1B training a small GPT-2 whose first and last stages are
# lighter: the schedule people actually run, on the model they actually run.
#
# The schedule is 1f1b.pp's (Narayanan et al., 2021; Megatron-LM's
# non-interleaved schedule): worker s holds stage s, warms up with S-1-s
# forwards, then alternates one forward with one backward, holding at most
# min(S-s, B) microbatches' activations.
#
# The model is GPT-2 (kernels/README.md, "The GPT model"): stage 0 also holds
# the token and position embeddings and the last stage the final layer norm
# and the vocabulary head, so they get one transformer layer and the middle
# stages two (`layers` may use s), as Megatron and DeepSpeed users balance
# their pipelines. Without cost lines the simulator charges each stage its
# FLOPs (compiler/README.md, "Costs"), so the report shows the balance.
# vocab 256 reads raw bytes (the demo's text); an llm.c token shard needs
# its tokenizer's vocab (50257 for GPT-2). `make demo MODEL=gpt` trains it
# 400 steps with ppvm --lr 6e-3 --adam-beta2 0.95 --warmup 20 (a GPT
# recipe's AdamW; B = 4 keeps a step short on a laptop's cores).
#
# Parameters: -D S=stages -D B=microbatches.

param S = 4
param B = 4
param W = S

# constraints: a -D that breaks one fails the compile, saying which
require W == S, "compute = s puts stage s on worker s: W must be S"

let warm = S - 1 - s

compute(s,b,d)  = s
weights(s,b,d)  = s
priority(s,b,d) = d == F ? (b <= warm ? b : 2 * b - warm) : warm + 1 + 2 * b
order strict
optimizer adamw   # SGD at the mlp demo's 0.3 diverges on a transformer

model gpt {
    vocab   = 256   # bytes
    context = 64
    embed   = 64
    heads   = 4
    ffn     = 256
    layers  = s == 0 || s == S - 1 ? 1 : 2
    batch   = 8
}

# search: S=W    # what ppc --search tries (compiler/README.md)
