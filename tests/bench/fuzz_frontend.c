/* fuzz_frontend.c - libFuzzer target for the whole schedule compiler.
 *
 * Each input is taken as a .pp source text and pushed through everything
 * ppc does, in process, with the same driver: pp_compile (compile.h: parse,
 * check with no -D defines, job table, simulation, report, lowering and the
 * plans' verification, commcheck among it), then, for every rank's plan, an
 * encode/decode round trip. Nothing is written to disk; diagnostics go to
 * /dev/null. Everything is freed, so a leak of the compiler shows up under
 * -fsanitize=address.
 *
 * Besides "no crash, no hang, no leak, no UB" the target checks what ppc
 * itself treats as internal errors: a compile that fails must say why (at
 * least one error), its plans must pass the compiler's own verification
 * (PP_COMPILE_INTERNAL otherwise), must encode, must decode, and must
 * re-encode to the same bytes, and ppvm's verifier (isa/verify.c) must
 * accept every rank's plan and the plans together: a refusal there would
 * be a false alarm on a plan ppc wrote.
 *
 * Bound per input: a checked schedule with more than MAX_JOBS jobs
 * (S*B*(split?3:2)) or more than MAX_W workers stops there (pp_compile's
 * max_jobs and max_workers). pp_schedule_check itself rejects more than
 * 50,000,000 jobs, which is bounded but far too slow for a fuzzer's
 * per-input timeout.
 *
 * Build and run: tests/bench/fuzz.sh [SECONDS]. Reproduce a crash:
 *   build/fuzz/fuzz_frontend crash-<sha1> */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "../../isa/verify.h"

enum { MAX_JOBS = 20000, MAX_W = 64 };

/* An invariant of the compiler failed: crash loudly so libFuzzer saves the input. */
static void internal_error(const char *what, int rank, const char *err)
{
    fprintf(stderr, "fuzz_frontend: internal error: %s (rank %d): %s\n", what, rank,
            err ? err : "");
    abort();
}

static void check_plan(const pp_plan *p, int rank)
{
    char err[512] = "";
    if (pp_plan_validate(p, err, sizeof err) != PP_PLAN_OK)
        internal_error("lowered plan does not validate", rank, err);
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    if (pp_plan_encode(p, &buf, &len) != PP_PLAN_OK)
        internal_error("pp_plan_encode failed", rank, NULL);
    pp_plan q;
    memset(&q, 0, sizeof q);
    if (pp_plan_decode(buf, len, &q, err, sizeof err) != PP_PLAN_OK)
        internal_error("pp_plan_decode rejects an encoded plan", rank, err);
    if (pp_plan_encode(&q, &buf2, &len2) != PP_PLAN_OK)
        internal_error("pp_plan_encode of the decoded plan failed", rank, NULL);
    if (len != len2 || memcmp(buf, buf2, len) != 0)
        internal_error("encode(decode(encode(plan))) differs from encode(plan)", rank, NULL);
    if (pp_verify_rank(&q, err, sizeof err))
        internal_error("ppvm's verifier refuses a compiled plan", rank, err);
    pp_plan_free(&q);
    free(buf);
    free(buf2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull) {
        devnull = fopen("/dev/null", "w");
        if (!devnull) {
            perror("fuzz_frontend: /dev/null");
            abort();
        }
    }
    pp_compile_opts o = pp_compile_defaults();
    o.path = "fuzz.pp";
    o.text = (const char *)data;
    o.len = size;
    o.max_jobs = MAX_JOBS;
    o.max_workers = MAX_W;
    o.diag_out = devnull;
    pp_compiled c;
    pp_compile_status st = pp_compile(&o, &c);
    if (st != PP_COMPILE_OK && c.errors == 0)
        internal_error("pp_compile failed without reporting an error", -1, NULL);
    if (st == PP_COMPILE_INTERNAL)
        internal_error("the lowered plans fail the compiler's verification", -1, NULL);
    for (int r = 0; st == PP_COMPILE_OK && r < c.t.W; r++)
        check_plan(&c.plans[r], r);
    char err[1024];
    if (st == PP_COMPILE_OK && pp_verify_world(c.plans, c.t.W, err, sizeof err))
        internal_error("ppvm's verifier refuses the compiled plans together", -1, err);
    pp_compiled_free(&c);
    return 0;
}
