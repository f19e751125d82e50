#!/usr/bin/env python3
"""gpt_data.py - the token stream of make gpu-bench-gpt, made here because the
GPU machine reaches no network: an llm.c token shard (vm/README.md, "Training
data": 256 int32 of header - magic 20240520, version 1, the count - then the
tokens as uint16) of N tokens below the vocabulary.

The stream is synthetic but learnable, so the first steps' losses fall as on
text: a fixed set of phrases (3 to 12 tokens each, the tokens drawn from a
Zipf law over the vocabulary) strung together, each next phrase drawn from a
Zipf law over the phrases that depends on the previous one. Everything comes
from one seed (random.Random), so ppvm and PyTorch read the same file.

    python3 tests/bench/gpt_data.py OUT.bin [--tokens N] [--vocab V] [--seed S]
"""
import argparse
import bisect
import itertools
import random
import struct
import sys
from array import array

SHARD_MAGIC = 20240520


def zipf_table(n, s=1.1):
    """Cumulative weights of a Zipf law over 0..n-1 (for bisect)."""
    return list(itertools.accumulate(1.0 / (k + 1) ** s for k in range(n)))


def draw(rng, cum):
    return bisect.bisect_left(cum, rng.random() * cum[-1])


def make(tokens, vocab, seed, phrases=4096):
    rng = random.Random(seed)
    cum_tok = zipf_table(vocab)
    perm = list(range(vocab))
    rng.shuffle(perm)  # frequent tokens spread over the vocabulary
    book = [[perm[draw(rng, cum_tok)] for _ in range(rng.randint(3, 12))] for _ in range(phrases)]
    cum_ph = zipf_table(phrases)
    out = array("H")
    prev = 0
    while len(out) < tokens:
        # the next phrase: a Zipf draw, shifted by the previous phrase
        prev = (draw(rng, cum_ph) + 7 * prev) % phrases
        out.extend(book[prev])
    del out[tokens:]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=1 << 21)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.tokens < 2 or not 1 <= a.vocab <= 65536:
        sys.exit("gpt_data.py: --tokens must be >= 2 and --vocab in [1, 65536]")
    tok = make(a.tokens, a.vocab, a.seed)
    if sys.byteorder != "little":
        tok.byteswap()
    head = struct.pack("<3i", SHARD_MAGIC, 1, len(tok)) + bytes(4 * 253)
    with open(a.out, "wb") as f:
        f.write(head)
        f.write(tok.tobytes())


if __name__ == "__main__":
    main()
