/* test_scale.c - the data structures that keep ppc near-linear on large
 * schedules, at their edges:
 *   names.c       the name index (params and lets): absent keys, the first
 *                 value kept, growth far past its first table, and a
 *                 schedule of 100,000 lets through the checker, with the
 *                 errors the index now answers (redefinition, used before
 *                 defined, unknown);
 *   slot_pool.c   the free-slot pool against the linear scan it replaced
 *                 (the reference below): equal sizes, the list order after
 *                 a take, growth, sizes that are no class, random runs;
 *   radix_sort.c  stability, groups, every digit, the double keys.
 * No timings: the benches measure speed (tests/bench/compile_scale.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/names.h"
#include "../../compiler/radix_sort.h"
#include "../../compiler/slot_pool.h"
#include "suites.h"
#include "testutil.h"

/* ------------------------------------------------------------ names */

START_TEST(names_basics)
{
    pp_names ix = {0};
    ck_assert_int_eq(pp_names_get(&ix, "x"), -1); /* empty: nothing allocated yet */
    int *v = pp_names_at(&ix, "x", 7);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(*v, 7);
    ck_assert_int_eq(*pp_names_at(&ix, "x", 9), 7); /* the first value stays */
    ck_assert_int_eq(pp_names_get(&ix, "x"), 7);
    ck_assert_int_eq(pp_names_get(&ix, "xx"), -1);
    ck_assert_int_eq(pp_names_get(&ix, ""), -1);
    *pp_names_at(&ix, "", 0) |= 2; /* the empty string is a key like any */
    ck_assert_int_eq(pp_names_get(&ix, ""), 2);
    ck_assert_uint_eq(ix.n, 2);
    pp_names_free(&ix);
    ck_assert_int_eq(pp_names_get(&ix, "x"), -1);
}
END_TEST

/* 20,000 keys that share long prefixes: every one found after the table
 * doubled many times, at most half full. */
START_TEST(names_growth)
{
    enum { N = 20000 };
    static char keys[N][24];
    pp_names ix = {0};
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "let_name_%d", i);
        ck_assert_ptr_nonnull(pp_names_at(&ix, keys[i], i));
        ck_assert_uint_le(2 * ix.n, ix.cap);
    }
    ck_assert_uint_eq(ix.n, N);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pp_names_get(&ix, keys[i]), i);
    ck_assert_int_eq(pp_names_get(&ix, "let_name_20000"), -1);
    ck_assert_int_eq(pp_names_get(&ix, "let_name_"), -1);
    pp_names_free(&ix);
}
END_TEST

/* A schedule with `n` lets x0..x{n-1} = s + i, compute by the last one,
 * then `tail`. Caller frees. */
static char *many_lets(int n, const char *tail)
{
    size_t cap = (size_t)n * 40 + strlen(tail) + 256, len = 0;
    char *src = malloc(cap);
    ck_assert_ptr_nonnull(src);
    len += (size_t)snprintf(src + len, cap - len, "param S = 4\nparam B = 4\nparam W = S\n");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(src + len, cap - len, "let x%d = s + %d\n", i, i);
    snprintf(src + len, cap - len, "compute(s,b,d) = (x%d - %d) %% W\n%s", n - 1, n - 1, tail);
    return src;
}

/* 100,000 lets (the case, which took minutes with a linear search
 * per name): every job lands on worker s through the last let. */
START_TEST(hundred_thousand_lets)
{
    char *src = many_lets(100000, "");
    pp_compiled c;
    ck_assert_int_eq(compile_text_to(&c, src, PP_STAGE_JOBS), PP_COMPILE_OK);
    ck_assert_int_eq(c.sch.nlets, 100000);
    for (int j = 0; j < job_count(&c.t.js); j++)
        ck_assert_int_eq(c.t.worker[j], job_s(&c.t.js, j));
    pp_compiled_free(&c);
    free(src);
}
END_TEST

/* The errors the index answers, at the end of 50,000 lets: a let defined
 * twice, a name used before its let, a param's name taken by a let, an
 * unknown name. */
START_TEST(many_lets_errors)
{
    char *src = many_lets(50000, "let x123 = 1\n"
                                 "let early = later + 1\n"
                                 "let later = 2\n"
                                 "let W = 3\n"
                                 "let u = nosuch\n");
    pp_compiled c;
    ck_assert_int_eq(compile_text_to(&c, src, PP_STAGE_CHECK), PP_COMPILE_ERRORS);
    ck_assert_ptr_nonnull(c.msgs);
    ck_assert_ptr_nonnull(strstr(c.msgs, "t.pp:50005:5: error: redefinition of 'x123'"));
    ck_assert_ptr_nonnull(
        strstr(c.msgs, "t.pp:50006:13: error: 'later' is used before it is defined"));
    ck_assert_ptr_nonnull(strstr(c.msgs, "t.pp:50008:5: error: redefinition of 'W'"));
    ck_assert_ptr_nonnull(strstr(c.msgs, "t.pp:50009:9: error: unknown name 'nosuch'"));
    ck_assert_int_eq(c.errors, 4);
    pp_compiled_free(&c);
    free(src);
}
END_TEST

/* Requirements walk the lets they use with visit marks that a new walk
 * clears at once: each of several requires over one let chain still finds
 * the params at its end, and 10,000 requires beside 10,000 lets (each walk
 * used to clear a mark per let) all hold but the last. */
START_TEST(requires_walk_lets_afresh)
{
    const char *src = "param S = 4\nparam B = 4\nparam W = S\nparam P = 3\n"
                      "let a = P + 1\nlet c = a * 2\n"
                      "require c > 0, \"one\"\n"
                      "require c < 0, \"two\"\n"
                      "require a + c < 0, \"three\"\n"
                      "compute(s,b,d) = s\n";
    pp_compiled c;
    ck_assert_int_eq(compile_text_to(&c, src, PP_STAGE_CHECK), PP_COMPILE_ERRORS);
    ck_assert_ptr_nonnull(strstr(c.msgs, "requirement failed: c < 0 (two) with P=3"));
    ck_assert_ptr_nonnull(strstr(c.msgs, "requirement failed: a + c < 0 (three) with P=3"));
    ck_assert_int_eq(c.errors, 2);
    pp_compiled_free(&c);

    enum { N = 10000 };
    size_t cap = (size_t)N * 64 + 256, len = 0;
    char *big = malloc(cap);
    ck_assert_ptr_nonnull(big);
    len += (size_t)snprintf(big, cap, "param S = 4\nparam B = 4\nparam W = S\nlet y0 = B\n");
    for (int i = 1; i < N; i++)
        len += (size_t)snprintf(big + len, cap - len, "let y%d = y%d + 1\n", i,
                                i % 1000 ? i - 1 : 0); /* chains of 1,000: within the depth bound */
    for (int i = 0; i < N; i++)
        len +=
            (size_t)snprintf(big + len, cap - len, "require y%d %s 0\n", i, i == N - 1 ? "<" : ">");
    snprintf(big + len, cap - len, "compute(s,b,d) = s\n");
    ck_assert_int_eq(compile_text_to(&c, big, PP_STAGE_CHECK), PP_COMPILE_ERRORS);
    ck_assert_int_eq(c.errors, 1);
    ck_assert_ptr_nonnull(strstr(c.msgs, "requirement failed: y9999 < 0 with B=4"));
    pp_compiled_free(&c);
    free(big);
}
END_TEST

/* -------------------------------------------------------- slot pool */

/* The reference: lower_slots.c's scan before the pool, a free list
 * searched in full, the last entry moved into a taken one's place. */
typedef struct {
    int list[256], n;
    uint64_t size[256];
} ref_pool;

static void ref_put(ref_pool *r, int slot, uint64_t bytes)
{
    r->size[slot] = bytes;
    r->list[r->n++] = slot;
}

static int ref_take(ref_pool *r, uint64_t want, int grow)
{
    int best = -1;
    uint64_t best_grow = 0, best_waste = 0;
    for (int f = 0; f < r->n; f++) {
        uint64_t have = r->size[r->list[f]];
        if (!grow && have != want)
            continue;
        uint64_t g = want > have ? want - have : 0, w = have > want ? have - want : 0;
        if (best < 0 || g < best_grow || (g == best_grow && w < best_waste)) {
            best = f;
            best_grow = g;
            best_waste = w;
        }
    }
    if (best < 0)
        return -1;
    int slot = r->list[best];
    r->list[best] = r->list[--r->n];
    return slot;
}

static const uint64_t CLASSES[] = {64, 128, 256, 4096};
#define NCLASS ((int)(sizeof CLASSES / sizeof *CLASSES))

/* Equal sizes: the one nearest the list's start, then the list's last
 * slot takes the freed position (reuse order 0, 3, 2, 1 after 0..3 freed). */
START_TEST(pool_equal_sizes_order)
{
    pp_slot_pool p;
    ck_assert_int_eq(pp_slot_pool_init(&p, CLASSES, NCLASS, 8), 0);
    for (int s = 0; s < 4; s++)
        ck_assert_int_eq(pp_slot_pool_put(&p, s, 128), 0);
    ck_assert_int_eq(pp_slot_pool_take(&p, 128, 0), 0); /* list 3 1 2 */
    ck_assert_int_eq(pp_slot_pool_take(&p, 128, 0), 3); /* list 2 1 */
    ck_assert_int_eq(pp_slot_pool_put(&p, 5, 128), 0);  /* list 2 1 5 */
    ck_assert_int_eq(pp_slot_pool_take(&p, 128, 1), 2); /* list 5 1 */
    ck_assert_int_eq(pp_slot_pool_take(&p, 128, 0), 5);
    ck_assert_int_eq(pp_slot_pool_take(&p, 128, 0), 1);
    ck_assert_int_eq(pp_slot_pool_take(&p, 128, 0), -1); /* empty */
    ck_assert_int_eq(pp_slot_pool_take(&p, 128, 1), -1);
    pp_slot_pool_free(&p);
}
END_TEST

/* exact never takes another size; grow takes the smallest that holds
 * `want`, else the largest (it grows least); a want between classes. */
START_TEST(pool_policies)
{
    pp_slot_pool p;
    ck_assert_int_eq(pp_slot_pool_init(&p, CLASSES, NCLASS, 8), 0);
    ck_assert_int_eq(pp_slot_pool_put(&p, 0, 64), 0);
    ck_assert_int_eq(pp_slot_pool_put(&p, 1, 4096), 0);
    ck_assert_int_eq(pp_slot_pool_put(&p, 2, 256), 0);
    ck_assert_int_eq(pp_slot_pool_take(&p, 128, 0), -1);
    ck_assert_int_eq(pp_slot_pool_take(&p, 100, 1), 2);   /* 256: smallest >= 100 */
    ck_assert_int_eq(pp_slot_pool_take(&p, 5000, 1), 1);  /* none holds it: 4096 */
    ck_assert_int_eq(pp_slot_pool_take(&p, 4096, 0), -1); /* taken */
    ck_assert_int_eq(pp_slot_pool_take(&p, 1, 1), 0);     /* 64, the last */
    ck_assert_int_eq(pp_slot_pool_take(&p, 1, 1), -1);
    pp_slot_pool_free(&p);
}
END_TEST

/* What the pool refuses: a size that is no class, a slot out of range, and
 * more free slots than it was made for. */
START_TEST(pool_refuses)
{
    pp_slot_pool p;
    ck_assert_int_eq(pp_slot_pool_init(&p, CLASSES, NCLASS, 2), 0);
    ck_assert_int_eq(pp_slot_pool_put(&p, 0, 100), -1);
    ck_assert_int_eq(pp_slot_pool_put(&p, 2, 64), -1);
    ck_assert_int_eq(pp_slot_pool_put(&p, -1, 64), -1);
    ck_assert_int_eq(pp_slot_pool_put(&p, 0, 64), 0);
    ck_assert_int_eq(pp_slot_pool_put(&p, 1, 64), 0);
    ck_assert_int_eq(pp_slot_pool_put(&p, 1, 64), -1); /* a third free slot */
    ck_assert_int_eq(pp_slot_pool_take(&p, 64, 0), 0);
    pp_slot_pool_free(&p);
    /* one class: the count tree is a single leaf */
    ck_assert_int_eq(pp_slot_pool_init(&p, CLASSES, 1, 4), 0);
    ck_assert_int_eq(pp_slot_pool_take(&p, 64, 1), -1);
    ck_assert_int_eq(pp_slot_pool_put(&p, 3, 64), 0);
    ck_assert_int_eq(pp_slot_pool_take(&p, 9999, 1), 3);
    pp_slot_pool_free(&p);
}
END_TEST

/* Random runs of frees and takes (slots growing when taken, as the scan
 * grows them) give the reference's answer at every step, for both
 * policies, with few classes (long runs of equal sizes) and many. */
START_TEST(pool_matches_linear_scan)
{
    static uint64_t many[200];
    for (int k = 0; k < 200; k++)
        many[k] = 8 * (uint64_t)(k + 1);
    const struct {
        const uint64_t *cls;
        int n;
    } sets[] = {{CLASSES, 1}, {CLASSES, NCLASS}, {many, 200}};
    unsigned seed = 12345;
    for (int set = 0; set < 3; set++)
        for (int grow = 0; grow < 2; grow++) {
            const uint64_t *cls = sets[set].cls;
            int nc = sets[set].n, used[256], size_cls[256];
            pp_slot_pool p;
            ref_pool r = {.n = 0};
            ck_assert_int_eq(pp_slot_pool_init(&p, cls, nc, 256), 0);
            for (int s = 0; s < 256; s++) {
                used[s] = 1;
                size_cls[s] = (int)(rand_r(&seed) % (unsigned)nc);
            }
            for (int step = 0; step < 20000; step++) {
                if (rand_r(&seed) % 2) { /* free a random used slot */
                    int s = (int)(rand_r(&seed) % 256);
                    if (!used[s])
                        continue;
                    used[s] = 0;
                    ck_assert_int_eq(pp_slot_pool_put(&p, s, cls[size_cls[s]]), 0);
                    ref_put(&r, s, cls[size_cls[s]]);
                } else {
                    int c = (int)(rand_r(&seed) % (unsigned)nc);
                    uint64_t want = cls[c] - (rand_r(&seed) % 3 == 0 ? 1 : 0);
                    int a = pp_slot_pool_take(&p, want, grow), b = ref_take(&r, want, grow);
                    ck_assert_int_eq(a, b);
                    if (a >= 0) {
                        used[a] = 1;
                        if (cls[size_cls[a]] < want) /* grows to the class of want */
                            size_cls[a] = c;
                    }
                }
            }
            pp_slot_pool_free(&p);
        }
}
END_TEST

/* ------------------------------------------------------- radix sort */

static int cmp_rec(const void *a, const void *b)
{
    const pp_sort_rec *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->val < y->val ? -1 : x->val > y->val; /* val = input position: stability */
}

/* Random records whose keys differ in every digit (and often tie), in
 * groups up to 2^32 - 1: the same order as a stable comparison sort, with
 * 8-bit digits (fewer than 65,536 records) and with 16-bit ones. */
START_TEST(radix_matches_qsort)
{
    const int N = _i == 0 ? 3000 : 70000;
    pp_sort_rec *a = malloc((size_t)N * sizeof *a), *b = malloc((size_t)N * sizeof *b);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        uint64_t k = 0;
        for (int d = 0; d < 4; d++)
            k |= (uint64_t)(rand_r(&seed) % 4) << (16 * d + (unsigned)(rand_r(&seed) % 14));
        uint32_t g = rand_r(&seed) % 5 == 0 ? 0xffffffffu - (uint32_t)(rand_r(&seed) % 3)
                                            : (uint32_t)(rand_r(&seed) % 70000);
        a[i] = (pp_sort_rec){k, g, (uint32_t)i};
    }
    memcpy(b, a, (size_t)N * sizeof *a);
    ck_assert_int_eq(pp_radix_sort(a, (size_t)N), 0);
    qsort(b, (size_t)N, sizeof *b, cmp_rec);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(a[i].val, b[i].val);
        ck_assert_uint_eq(a[i].key, b[i].key);
        ck_assert_uint_eq(a[i].group, b[i].group);
    }
    free(a);
    free(b);
}
END_TEST

/* All keys equal (every pass skipped): the input order stands; 0 and 1
 * records are sorted already. */
START_TEST(radix_edges)
{
    pp_sort_rec r[5];
    for (int i = 0; i < 5; i++)
        r[i] = (pp_sort_rec){42, 3, (uint32_t)(4 - i)};
    ck_assert_int_eq(pp_radix_sort(r, 5), 0);
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq(r[i].val, (uint32_t)(4 - i));
    ck_assert_int_eq(pp_radix_sort(r, 0), 0);
    ck_assert_int_eq(pp_radix_sort(r, 1), 0);
    ck_assert_uint_eq(r[0].val, 4);
}
END_TEST

/* Keys order doubles as < does; -0.0 and 0.0 (equal) share one. */
START_TEST(double_keys)
{
    const double x[] = {-1e300, -2.5, -1, -1e-300, 0, 1e-300, 0.5, 1, 3, 1e300};
    int n = (int)(sizeof x / sizeof *x);
    for (int i = 0; i + 1 < n; i++)
        ck_assert(pp_double_key(x[i]) < pp_double_key(x[i + 1]));
    ck_assert_uint_eq(pp_double_key(-0.0), pp_double_key(0.0));
    ck_assert_uint_eq(pp_double_key(2.0), pp_double_key(2.0));
}
END_TEST

Suite *scale_suite(void)
{
    Suite *s = suite_create("scale");
    TCase *names = tcase_create("names");
    tcase_add_test(names, names_basics);
    tcase_add_test(names, names_growth);
    tcase_add_test(names, hundred_thousand_lets);
    tcase_add_test(names, many_lets_errors);
    tcase_add_test(names, requires_walk_lets_afresh);
    tcase_set_timeout(names, 60);
    suite_add_tcase(s, names);
    TCase *pool = tcase_create("slot_pool");
    tcase_add_test(pool, pool_equal_sizes_order);
    tcase_add_test(pool, pool_policies);
    tcase_add_test(pool, pool_refuses);
    tcase_add_test(pool, pool_matches_linear_scan);
    suite_add_tcase(s, pool);
    TCase *sort = tcase_create("radix_sort");
    tcase_add_loop_test(sort, radix_matches_qsort, 0, 2);
    tcase_add_test(sort, radix_edges);
    tcase_add_test(sort, double_keys);
    suite_add_tcase(s, sort);
    return s;
}
