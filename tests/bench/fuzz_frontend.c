/* fuzz_frontend.c - libFuzzer target for the whole schedule compiler.
 *
 * Each input is taken as a .pp source text and pushed through everything
 * ppc's main() does, in process: pp_parse, pp_schedule_check (no -D
 * defines), pp_jobtable_build, pp_simulate, pp_lower, then, for every
 * rank's plan, pp_plan_validate and an encode/decode round trip. Nothing is
 * written to disk; diagnostics go to /dev/null. Everything is freed, so a
 * leak of the compiler shows up under -fsanitize=address.
 *
 * Besides "no crash, no hang, no leak, no UB" the target checks what ppc
 * itself treats as internal errors: a lowered plan must validate, must
 * encode, must decode, and must re-encode to the same bytes.
 *
 * Bound per input: evaluating every job, simulating and lowering are skipped
 * when the checked schedule has more than MAX_JOBS jobs (S*B*(split?3:2));
 * simulation and lowering also when W > MAX_W. pp_schedule_check itself
 * rejects more than 50,000,000 jobs, which is bounded but far too slow for a
 * fuzzer's per-input timeout.
 *
 * Build and run: tests/bench/fuzz.sh [SECONDS]. Reproduce a crash:
 *   build/fuzz/fuzz_frontend crash-<sha1> */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobtable.h"
#include "lower.h"
#include "parse.h"
#include "schedule.h"
#include "sim.h"

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
    char *src = malloc(size + 1);
    if (!src)
        return 0;
    if (size)
        memcpy(src, data, size);
    src[size] = '\0';

    pp_diag d;
    diag_init(&d, "fuzz.pp", src, size, devnull);
    pp_schedule sch;
    memset(&sch, 0, sizeof sch);
    pp_jobtable t;
    memset(&t, 0, sizeof t);
    pp_sim_result sim;
    memset(&sim, 0, sizeof sim);
    pp_plan *plans = NULL;

    pp_stmt *stmts = pp_parse(&d);
    if (pp_schedule_check(&sch, &d, stmts, NULL, 0) || d.errors)
        goto out;
    /* A checked schedule has 1 <= S, B <= 2^20 and 1 <= W <= 2^16. */
    long long jobs = sch.S * sch.B * (sch.split ? 3 : 2);
    if (jobs > MAX_JOBS)
        goto out;
    if (pp_jobtable_build(&t, &sch, NULL))
        goto out;
    if (sch.W > MAX_W)
        goto out;
    pp_sim_input in = pp_jobtable_sim_input(&t, sch.strict);
    int srun = pp_simulate(&in, &sim);
    if (srun != 0)
        goto out; /* -1: out of memory; 1: deadlock (ppc reports it) */
    plans = calloc((size_t)t.W, sizeof *plans);
    if (!plans)
        goto out;
    int before = d.errors;
    if (pp_lower(&t, &sim, &sch.model, &(pp_lower_opts){1, 0}, &d, plans)) {
        if (d.errors == before)
            internal_error("pp_lower failed without reporting an error", -1, NULL);
        goto out;
    }
    for (int r = 0; r < t.W; r++)
        check_plan(&plans[r], r);

out:
    for (int w = 0; plans && w < t.W; w++)
        pp_plan_free(&plans[w]);
    free(plans);
    pp_sim_free(&sim);
    pp_jobtable_free(&t);
    pp_schedule_free(&sch);
    ast_free_stmts(stmts);
    free(src);
    return 0;
}
