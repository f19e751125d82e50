/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <check.h>


/* The tests' compile: as far as the simulation, diagnostics collected. */
static void compile_to_sim(compiled *c, const char *path, const char *text,
                           const pp_define *defs, int ndefs)
{
    pp_compile_opts o = pp_compile_defaults();
    o.path = path;
    o.text = text;
    o.len = text ? strlen(text) : 0;
    o.defs = defs;
    o.ndefs = ndefs;
    o.stop_after = PP_STAGE_SIMULATE;
    o.capture = 1;
    pp_compile(&o, c);
}

void compile_src(compiled *c, const char *src, const pp_define *defs, int ndefs)
{
    compile_to_sim(c, "t.pp", src, defs, ndefs);
}

void compile_library(compiled *c, const char *name, const pp_define *defs, int ndefs)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules/%s", PP_ROOT, name);
    compile_to_sim(c, path, NULL, defs, ndefs);
    ck_assert_msg(c->status != PP_COMPILE_IO, "%s", c->msgs);
}

void compiled_free(compiled *c) { pp_compiled_free(c); }

char *worker_order(const compiled *c, int w, char what)
{
    size_t cap = 64 + 24 * (size_t)(c->sim.off[w + 1] - c->sim.off[w]), n = 0;
    char *out = malloc(cap);
    out[0] = '\0';
    for (int k = c->sim.off[w]; k < c->sim.off[w + 1]; k++) {
        int j = c->sim.order[k];
        const pp_jobspace *js = &c->t.js;
        char d = dir_char(job_d(js, j));
        if (what == 'b')
            n += (size_t)snprintf(out + n, cap - n, "%s%c%d", n ? " " : "", d, job_b(js, j));
        else if (what == 's')
            n += (size_t)snprintf(out + n, cap - n, "%s%c%d", n ? " " : "", d, job_s(js, j));
        else
            n += (size_t)snprintf(out + n, cap - n, "%s%c(%d,%d)", n ? " " : "", d, job_s(js, j),
                                  job_b(js, j));
    }
    return out;
}

int run_cmd(const char *cmd, char **out)
{
    char *full = malloc(strlen(cmd) + 16);
    sprintf(full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    free(full);
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

char *temp_dir(void)
{
    char *t = strdup("/tmp/pp-test-XXXXXX");
    if (!mkdtemp(t)) {
        perror("mkdtemp");
        abort();
    }
    return t;
}

char *compile_plan(const char *schedule, const char *args)
{
    char *dir = temp_dir(), cmd[2048], *out;
    if (strchr(schedule, '/')) /* a path, not a library schedule */
        snprintf(cmd, sizeof cmd, "%s/bin/ppc %s %s -o %s/plan -q", PP_ROOT, schedule, args, dir);
    else
        snprintf(cmd, sizeof cmd, "%s/bin/ppc %s/schedules/%s %s -o %s/plan -q", PP_ROOT,
                 PP_ROOT, schedule, args, dir);
    int rc = run_cmd(cmd, &out);
    ck_assert_msg(rc == 0, "%s failed:\n%s", cmd, out);
    free(out);
    return dir;
}

void remove_dir(char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    run_cmd(cmd, NULL);
    free(dir);
}

#ifdef PP_HAVE_CUDA
#include <cuda_runtime_api.h>
int have_gpu(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#else
int have_gpu(void) { return 0; }
#endif

/* The numbers of `key` in a --profile file: "key": [a, b, ...] or
 * "key": a. Returns how many (at most max), all of which must be > 0. */
int profile_values(const char *json, const char *key, double *v, int max)
{
    char want[32];
    snprintf(want, sizeof want, "\"%s\": ", key);
    const char *p = strstr(json, want);
    if (!p)
        return 0;
    p += strlen(want);
    int list = *p == '[', n = 0;
    p += list;
    while (n < max) {
        char *end;
        v[n] = strtod(p, &end);
        ck_assert_msg(end != p && v[n] > 0, "%s: not a positive number at '%.20s'", key, p);
        n++;
        p = end;
        if (!list || *p != ',')
            break;
        p += 2;
    }
    return n;
}
