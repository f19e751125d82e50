/* test_data.c - the data loader (vm/data.c, linked into check_pp): raw
 * bytes and llm.c token shards, written here, loaded with pp_data_load;
 * the tokens and microbatches they give, and the message of each kind of
 * bad file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../vm/data.h"
#include "suites.h"
#include "testutil.h"

static const pp_model mlp = {
    .kind = PP_MODEL_MLP, .context = 4, .embed = 2, .ffn = 4, .blocks = 1, .batch = 3};
static pp_model gpt_with(uint32_t vocab)
{
    pp_model m = {.kind = PP_MODEL_GPT,
                  .vocab = vocab,
                  .context = 4,
                  .embed = 8,
                  .heads = 2,
                  .ffn = 16,
                  .blocks = 1,
                  .batch = 3};
    return m;
}

static char *dir;
static char path[4096];

static void setup(void) { dir = temp_dir(); }
static void teardown(void) { remove_dir(dir); }

static const char *write_file(const char *name, const void *bytes, size_t n)
{
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

/* An llm.c shard: header {magic, version, count}, then `ntok` tokens (may
 * differ from count, to make bad files) plus `extra` stray bytes. */
static const char *write_shard(const char *name, int32_t magic, int32_t version, int32_t count,
                               const uint16_t *tok, size_t ntok, size_t extra)
{
    size_t n = 1024 + 2 * ntok + extra;
    uint8_t *buf = calloc(1, n);
    int32_t head[3] = {magic, version, count};
    memcpy(buf, head, sizeof head); /* little-endian machines */
    memcpy(buf + 1024, tok, 2 * ntok);
    const char *p = write_file(name, buf, n);
    free(buf);
    return p;
}

/* Loading must fail with a message holding the file's path and `want`. */
static void load_fails(const char *file, const pp_model *m, const char *want)
{
    pp_dataset ds;
    char err[1024];
    ck_assert_int_eq(pp_data_load(&ds, file, m, err, sizeof err), -1);
    ck_assert_ptr_null(ds.tokens);
    ck_assert_msg(strstr(err, file), "the message does not name the file: %s", err);
    ck_assert_msg(strstr(err, want), "expected '%s' in: %s", want, err);
}

START_TEST(raw_bytes)
{
    const char text[] = "the quick brown fox jumps over the lazy dog";
    const char *f = write_file("t.txt", text, sizeof text - 1);
    pp_dataset ds;
    char err[1024];
    ck_assert_int_eq(pp_data_load(&ds, f, &mlp, err, sizeof err), 0);
    ck_assert_int_eq(ds.format, PP_DATA_BYTES);
    ck_assert_uint_eq(ds.len, sizeof text - 1);
    for (size_t i = 0; i < ds.len; i++)
        ck_assert_uint_eq(ds.tokens[i], (uint8_t)text[i]);
    /* every row of a microbatch is a window of the text */
    int32_t tok[3 * 5];
    for (int step = 0; step < 3; step++) {
        pp_data_microbatch(&ds, &mlp, 7, step, 1, tok);
        for (int r = 0; r < 3; r++) {
            char win[6] = {0};
            for (int c = 0; c < 5; c++)
                win[c] = (char)tok[r * 5 + c];
            ck_assert_msg(strstr(text, win), "row %d '%s' is not a window of the text", r, win);
        }
    }
    pp_data_free(&ds);
    ck_assert_ptr_null(ds.tokens);
}
END_TEST

/* A shard's tokens load as written, and a shard and a raw file holding the
 * same tokens give the same microbatches: the sampling is the format's
 * business only through the token count. */
START_TEST(shard_loads_and_samples_like_bytes)
{
    enum { N = 300 };
    uint16_t tok[N];
    uint8_t raw[N];
    for (int i = 0; i < N; i++)
        raw[i] = (uint8_t)(tok[i] = (uint16_t)((i * 37 + 11) % 200));
    pp_model m = gpt_with(50257);
    pp_dataset a, b;
    char err[1024];
    ck_assert_msg(
        pp_data_load(&a, write_shard("s.bin", 20240520, 1, N, tok, N, 0), &m, err, sizeof err) == 0,
        "%s", err);
    ck_assert_int_eq(a.format, PP_DATA_SHARD);
    ck_assert_uint_eq(a.len, N);
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(a.tokens[i], tok[i]);
    ck_assert_msg(pp_data_load(&b, write_file("r.txt", raw, N), &m, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(b.format, PP_DATA_BYTES);
    int32_t ta[3 * 5], tb[3 * 5];
    for (int step = 0; step < 4; step++)
        for (int mb = 0; mb < 3; mb++) {
            pp_data_microbatch(&a, &m, 1, step, mb, ta);
            pp_data_microbatch(&b, &m, 1, step, mb, tb);
            ck_assert_mem_eq(ta, tb, sizeof ta);
        }
    pp_data_free(&a);
    pp_data_free(&b);
}
END_TEST

/* Large token ids survive (uint16, little-endian), and the sampling is
 * pinned: microbatch 2 of step 3 with seed 5 starts its rows at these
 * positions, which tests/bench/torch_oracle.py's reimplementation of the
 * sampling gives too. */
START_TEST(shard_large_tokens_and_pinned_windows)
{
    enum { N = 1000 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)(49000 + i);
    pp_model m = gpt_with(50257);
    pp_dataset ds;
    char err[1024];
    ck_assert_msg(pp_data_load(&ds, write_shard("s.bin", 20240520, 1, N, tok, N, 0), &m, err,
                               sizeof err) == 0,
                  "%s", err);
    int32_t t[3 * 5];
    pp_data_microbatch(&ds, &m, 5, 3, 2, t);
    const int start[3] = {733, 463, 905}; /* of 1000 - 4 windows */
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++)
            ck_assert_int_eq(t[r * 5 + c], 49000 + start[r] + c);
    pp_data_free(&ds);
}
END_TEST

START_TEST(bad_shards)
{
    uint16_t tok[64] = {0};
    pp_model m = gpt_with(1000);
    load_fails(write_shard("v2.bin", 20240520, 2, 64, tok, 64, 0), &m,
               "llm.c token shard of version 2; expected version 1");
    load_fails(write_shard("empty.bin", 20240520, 1, 0, tok, 0, 0), &m,
               "llm.c token shard of 0 tokens; the model's context of 4 needs at least 5");
    load_fails(write_shard("short.bin", 20240520, 1, 4, tok, 4, 0), &m,
               "llm.c token shard of 4 tokens; the model's context of 4 needs at least 5");
    load_fails(write_shard("neg.bin", 20240520, 1, -3, tok, 0, 0), &m,
               "llm.c token shard of -3 tokens");
    load_fails(write_shard("trunc.bin", 20240520, 1, 64, tok, 63, 0), &m,
               "llm.c token shard of 64 tokens, so it should have 1024 + 2*64 = 1152 bytes, but "
               "it has 1150");
    load_fails(write_shard("long.bin", 20240520, 1, 64, tok, 64, 1), &m,
               "should have 1024 + 2*64 = 1152 bytes, but it has 1153");
    int32_t head[3] = {20240520, 1, 64};
    load_fails(write_file("header.bin", head, sizeof head), &m,
               "starts with the llm.c token shard magic 20240520 but has 12 bytes, fewer than the "
               "shard header's 1024");
    tok[17] = 1000;
    load_fails(write_shard("vocab.bin", 20240520, 1, 64, tok, 64, 0), &m,
               "token 17 is 1000, outside the model's vocabulary of 1000 (expected tokens 0 to "
               "999)");
    tok[17] = 256; /* the mlp model's vocabulary is 256 */
    load_fails(write_shard("mlp.bin", 20240520, 1, 64, tok, 64, 0), &mlp,
               "token 17 is 256, outside the model's vocabulary of 256");
    tok[17] = 999;
    pp_dataset ds;
    char err[1024];
    ck_assert_msg(pp_data_load(&ds, write_shard("ok.bin", 20240520, 1, 64, tok, 64, 0), &m, err,
                               sizeof err) == 0,
                  "%s", err);
    pp_data_free(&ds);
}
END_TEST

/* Raw bytes are tokens 0..255: a gpt whose vocab is smaller takes a file
 * only when every byte fits, and says which byte does not. */
START_TEST(raw_bytes_and_small_vocab)
{
    const char text[] = "abcabcabcabc";
    pp_model m = gpt_with(98);
    load_fails(write_file("t.txt", text, sizeof text - 1), &m,
               "is read as raw bytes (one token each; it is not an llm.c token shard), but byte "
               "1 is 98, outside the model's vocabulary of 98");
    m.vocab = 'c' + 1;
    pp_dataset ds;
    char err[1024];
    ck_assert_msg(pp_data_load(&ds, path, &m, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ds.len, sizeof text - 1);
    pp_data_free(&ds);
    load_fails(write_file("tiny.txt", "abcd", 4), &mlp,
               "has 4 bytes; the model's context of 4 needs at least 5");
    snprintf(path, sizeof path, "%s/missing", dir);
    load_fails(path, &mlp, "cannot open data file");
}
END_TEST

Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, raw_bytes);
    tcase_add_test(tc, shard_loads_and_samples_like_bytes);
    tcase_add_test(tc, shard_large_tokens_and_pinned_windows);
    tcase_add_test(tc, bad_shards);
    tcase_add_test(tc, raw_bytes_and_small_vocab);
    suite_add_tcase(s, tc);
    return s;
}
