/* fuzz_plan.c - libFuzzer target for the plan loader and ppvm's single-rank
 * verifier: what a crafted plan file meets before any rank talks to another.
 *
 * Each input is taken as a plan file whose last four bytes are then
 * overwritten with the right CRC-32 (so the fuzzer's edits get past the
 * checksum, as an attacker's would), decoded (pp_plan_decode), and when it
 * decodes, listed (pp_plan_disasm to /dev/null), verified as one rank
 * (pp_verify_rank: slot sizes, dataflow, accumulations, own-stage order,
 * roles) and, for a one-rank plan, as a world (pp_verify_world: the
 * communication replay, the jobs, the content hash). None of them may
 * crash, leak, hang or hit undefined behaviour on any input; a decoded
 * plan must re-encode to the same bytes.
 *
 * Build and run: make fuzz FUZZ_SECONDS=60 (tests/bench/fuzz.sh). Reproduce:
 *   build/fuzz/fuzz_plan crash-<sha1> */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../isa/plan.h"
#include "../../isa/verify.h"

/* A plan longer than this gains the fuzzer nothing and costs time. */
enum { MAX_LEN = 1 << 16 };

static FILE *devnull;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len > MAX_LEN)
        return 0;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, len);
    if (len >= 4) {
        uint32_t c = pp_crc32(buf, len - 4);
        for (int i = 0; i < 4; i++)
            buf[len - 4 + i] = (uint8_t)(c >> (8 * i));
    }
    pp_plan p;
    char err[1024];
    if (pp_plan_decode(buf, len, &p, err, sizeof err) == PP_PLAN_OK) {
        uint8_t *again;
        size_t n;
        if (pp_plan_encode(&p, &again, &n) == PP_PLAN_OK) {
            if (n != len || memcmp(again, buf, len)) {
                fprintf(stderr, "fuzz_plan: a decoded plan re-encodes to other bytes\n");
                abort();
            }
            free(again);
        }
        if (devnull)
            pp_plan_disasm(&p, devnull);
        if (pp_verify_rank(&p, err, sizeof err) == 0 && p.world == 1)
            pp_verify_world(&p, 1, err, sizeof err);
        pp_plan_free(&p);
    }
    free(buf);
    return 0;
}
