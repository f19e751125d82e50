/* plan.c - the plan file: checksums, encoding, a decoder
 * that is safe on any input, file helpers and the operand/header checks.
 * (The listing lives in disasm.c.)
 *
 * Decode checks, in this order, and stops at the first failure:
 *   1. magic      "PPLN" (a file shorter than 4 bytes that starts like the
 *                 magic is reported as truncated, anything else as EMAGIC);
 *   2. version    checked BEFORE the checksum: a reader meeting a newer format
 *                 should say "unsupported version", not "corrupt", and the
 *                 layout (and so where the checksum sits) may differ between
 *                 versions anyway;
 *   3. structure  every field is read through a bounds-checked cursor; a count
 *                 is compared with the bytes left before anything is
 *                 allocated, so a corrupt count reports truncation instead of
 *                 asking for gigabytes (the file length is the cap);
 *   4. checksum   CRC32 of every byte before it;
 *   5. trailing   no bytes may follow the checksum;
 *   6. validate   header and operand ranges (pp_plan_validate).
 * The checksum can only be located after the counts have been parsed, which
 * is why a corrupt count surfaces as truncation rather than a CRC error. */
#include "plan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <zlib.h>

#include "openfile.h"
#include "tensor_lane.h"

/* ---------------------------------------------------------------- messages */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* --------------------------------------------------------------- checksums */

/* zlib's CRC-32: the reflected IEEE 802.3 polynomial, as PNG and gzip use it. */
uint32_t pp_crc32(const uint8_t *buf, size_t len) { return (uint32_t)crc32_z(0, buf, len); }

uint64_t pp_fnv1a64(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The hash of an integer's little-endian bytes: the plan id must not
 * depend on the host's endianness or struct layout, as the file does not. */
static uint64_t fnv_le(uint64_t h, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        h ^= (uint8_t)(v >> (8 * i));
        h *= 1099511628211ull;
    }
    return h;
}

/* The plan id: a hash of every rank's content (the compiler stamps it, the
 * VM recomputes it at start-up over the plans all ranks loaded). The
 * format version is not hashed, on purpose: the id names what the plans
 * mean (checkpoints are tied to it, listings print it), and a version bump
 * changes how a plan is written, not what it means, so the same schedule
 * keeps its id, its checkpoints and its golden listings across bumps (a
 * file of another version is refused by the decoder anyway). Every
 * field goes in as its little-endian bytes, 4 for a 32-bit one, 8 for a
 * 64-bit one; the model as its ten 32-bit fields and then 8 zero bytes
 * (where the first version hashed the struct with its layer table's
 * pointer set to NULL: on a little-endian 64-bit host the same bytes, so
 * the same ids as before). */
uint64_t pp_plans_id(const pp_plan *plans, int W)
{
    uint64_t h = PP_FNV_OFFSET;
    for (int r = 0; r < W; r++) {
        const pp_plan *p = &plans[r];
        const pp_model *m = &p->model;
        h = fnv_le(h, p->world, 4);
        h = fnv_le(h, p->S, 4);
        h = fnv_le(h, p->B, 4);
        const uint32_t mf[] = {m->kind, m->vocab,  m->context, m->embed,     m->heads,
                               m->ffn,  m->blocks, m->batch,   m->optimizer, m->precision};
        for (size_t k = 0; k < sizeof mf / sizeof *mf; k++)
            h = fnv_le(h, mf[k], 4);
        if (pp_model_tensor(m) > 1) /* only then: plans without it keep their ids */
            h = fnv_le(h, pp_model_tensor(m), 4);
        h = fnv_le(h, 0, 8);
        /* Format 8's fields only where set, so every earlier plan keeps its id. */
        if (m->kv_heads || m->rope_theta || m->norm_eps != 0.0f || m->tie) {
            uint32_t eps;
            memcpy(&eps, &m->norm_eps, 4);
            const uint32_t xf[] = {m->kv_heads, m->rope_theta, eps, m->tie};
            for (size_t k = 0; k < sizeof xf / sizeof *xf; k++)
                h = fnv_le(h, xf[k], 4);
        }
        for (uint32_t s = 0; s < p->S; s++) /* the layer table, also where it is NULL */
            h = fnv_le(h, pp_model_layers(m, (int)s), 4);
        h = pp_fnv1a64(h, p->stage_role, p->S);
        h = fnv_le(h, p->nslots, 4);
        for (uint32_t k = 0; k < p->nslots; k++)
            h = fnv_le(h, p->slot_bytes[k], 8);
        h = fnv_le(h, p->workspace_bytes, 8);
        h = fnv_le(h, p->ngroups, 4);
        for (uint32_t g = 0; g < p->ngroups; g++) {
            h = fnv_le(h, p->groups[g].n, 4);
            for (uint32_t k = 0; k < p->groups[g].n; k++)
                h = fnv_le(h, p->groups[g].member[k], 4);
        }
        h = fnv_le(h, p->ninstr, 4);
        for (uint32_t i = 0; i < p->ninstr; i++) {
            const pp_instr *in = &p->code[i];
            h = fnv_le(h, in->op, 4);
            h = fnv_le(h, (uint32_t)in->stage, 4);
            h = fnv_le(h, (uint32_t)in->mb, 4);
            h = fnv_le(h, (uint32_t)in->peer, 4);
            h = fnv_le(h, (uint32_t)in->group, 4);
            for (int k = 0; k < PP_MAX_SLOTS; k++)
                h = fnv_le(h, (uint32_t)in->slot[k], 4);
        }
    }
    return h;
}

int pp_transfer_tag(const pp_plan *p, int op, int s, int b)
{
    const pp_op_info *o = pp_op(op);
    if (!o || o->tag == PP_TAG_NONE)
        return -1;
    if (!(o->uses & PP_U_MB) || b < 0)
        b = 0;
    return (int)(((int64_t)s * p->B + b) * PP_TAG_CLASSES + o->tag);
}

long long pp_transfer_tags(const pp_plan *p) { return (long long)p->S * p->B * PP_TAG_CLASSES; }

/* ---------------------------------------------------------------- encoding */

#define HEADER_BYTES (4 + 4 + 8 + 4 * 4) /* magic .. B */
#define MODEL_BYTES (15 * 4) /* format 8: 10 fields, then tensor, kv_heads, rope_theta, norm_eps, tie */
#define INSTR_BYTES (1 + 4 * 4 + 4 * PP_MAX_SLOTS)

/* Byte writers: explicit little-endian stores, so the file is the same on
 * every host whatever its endianness or struct padding. */
typedef struct {
    uint8_t *p;
} writer;

static void put_u8(writer *w, uint8_t v) { *w->p++ = v; }

static void put_u32(writer *w, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        *w->p++ = (uint8_t)(v >> (8 * i));
}

static void put_u64(writer *w, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        *w->p++ = (uint8_t)(v >> (8 * i));
}

static void put_i32(writer *w, int32_t v) { put_u32(w, (uint32_t)v); }

static size_t encoded_size(const pp_plan *p)
{
    size_t n =
        HEADER_BYTES + MODEL_BYTES + p->S + (size_t)p->S * 4 + 4 + (size_t)p->nslots * 8 + 8 + 4;
    for (uint32_t g = 0; g < p->ngroups; g++)
        n += 4 + (size_t)(p->groups ? p->groups[g].n : 0) * 4;
    return n + 4 + (size_t)p->ninstr * INSTR_BYTES + 4;
}

static void put_model(writer *w, const pp_model *m)
{
    put_u32(w, m->kind);
    put_u32(w, m->vocab);
    put_u32(w, m->context);
    put_u32(w, m->embed);
    put_u32(w, m->heads);
    put_u32(w, m->ffn);
    put_u32(w, m->blocks);
    put_u32(w, m->batch);
    put_u32(w, m->optimizer);
    put_u32(w, m->precision);
    put_u32(w, pp_model_tensor(m));
    uint32_t eps;
    memcpy(&eps, &m->norm_eps, 4);
    put_u32(w, m->kv_heads);
    put_u32(w, m->rope_theta);
    put_u32(w, eps);
    put_u32(w, m->tie);
}

static void put_instr(writer *w, const pp_instr *in)
{
    put_u8(w, in->op);
    put_i32(w, in->stage);
    put_i32(w, in->mb);
    put_i32(w, in->peer);
    put_i32(w, in->group);
    for (int k = 0; k < PP_MAX_SLOTS; k++)
        put_i32(w, in->slot[k]);
}

/* Arrays whose pointer is NULL are written as zeros rather than crashing;
 * validate rejects such a plan before anyone should write it. */
static void put_tables(writer *w, const pp_plan *p)
{
    for (uint32_t s = 0; s < p->S; s++)
        put_u8(w, p->stage_role ? p->stage_role[s] : 0);
    for (uint32_t s = 0; s < p->S; s++)
        put_u32(w, pp_model_layers(&p->model, (int)s));
    put_u32(w, p->nslots);
    for (uint32_t i = 0; i < p->nslots; i++)
        put_u64(w, p->slot_bytes ? p->slot_bytes[i] : 0);
    put_u64(w, p->workspace_bytes);
    put_u32(w, p->ngroups);
    for (uint32_t g = 0; g < p->ngroups; g++) {
        uint32_t n = p->groups ? p->groups[g].n : 0;
        put_u32(w, n);
        for (uint32_t k = 0; k < n; k++)
            put_u32(w, p->groups[g].member ? p->groups[g].member[k] : 0);
    }
    put_u32(w, p->ninstr);
    for (uint32_t i = 0; i < p->ninstr; i++) {
        static const pp_instr none = {0, -1, -1, -1, -1, {-1, -1, -1, -1}};
        put_instr(w, p->code ? &p->code[i] : &none);
    }
}

pp_plan_status pp_plan_encode(const pp_plan *p, uint8_t **buf, size_t *len)
{
    size_t n = encoded_size(p);
    uint8_t *out = malloc(n);
    if (!out)
        return PP_PLAN_ENOMEM;
    writer w = {out};
    memcpy(w.p, PP_PLAN_MAGIC, 4);
    w.p += 4;
    put_u32(&w, p->version);
    put_u64(&w, p->plan_id);
    put_u32(&w, p->rank);
    put_u32(&w, p->world);
    put_u32(&w, p->S);
    put_u32(&w, p->B);
    put_model(&w, &p->model);
    put_tables(&w, p);
    put_u32(&w, pp_crc32(out, n - 4));
    *buf = out;
    *len = n;
    return PP_PLAN_OK;
}

/* ---------------------------------------------------------------- decoding */

/* A bounds-checked cursor. The first failure is recorded and every later
 * read returns 0 without touching the buffer, so the parser can read a whole
 * section and test the status once; counts read after a failure are 0, so
 * nothing is allocated for them. */
typedef struct {
    const uint8_t *buf;
    size_t len, pos;
    pp_plan_status st;
    char *err;
    size_t errlen;
} reader;

static bool rd_ok(const reader *r) { return r->st == PP_PLAN_OK; }

/* Make sure `n` more bytes exist for `what`; otherwise report truncation
 * with where the file ends and how much is missing. */
static bool rd_need(reader *r, uint64_t n, const char *what)
{
    if (!rd_ok(r))
        return false;
    uint64_t left = r->len - r->pos;
    if (n <= left)
        return true;
    r->st = PP_PLAN_ETRUNC;
    set_err(r->err, r->errlen,
            "truncated: file ends at byte %zu while reading %s (need %" PRIu64 " more bytes)",
            r->len, what, n - left);
    return false;
}

static uint8_t rd_u8(reader *r, const char *what)
{
    if (!rd_need(r, 1, what))
        return 0;
    return r->buf[r->pos++];
}

static uint32_t rd_u32(reader *r, const char *what)
{
    if (!rd_need(r, 4, what))
        return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)r->buf[r->pos + i] << (8 * i);
    r->pos += 4;
    return v;
}

static uint64_t rd_u64(reader *r, const char *what)
{
    if (!rd_need(r, 8, what))
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)r->buf[r->pos + i] << (8 * i);
    r->pos += 8;
    return v;
}

static int32_t rd_i32(reader *r, const char *what) { return (int32_t)rd_u32(r, what); }

/* calloc for `count` elements of `size` bytes, NULL (and OK) for zero. The
 * caller has already checked `count` against the bytes left in the file. */
static void *rd_alloc(reader *r, uint32_t count, size_t size, const char *what)
{
    if (!rd_ok(r) || count == 0)
        return NULL;
    void *a = calloc(count, size);
    if (!a) {
        r->st = PP_PLAN_ENOMEM;
        set_err(r->err, r->errlen, "out of memory allocating %" PRIu32 " entries for %s", count,
                what);
    }
    return a;
}

/* Magic: a short file that is a prefix of "PPLN" is a truncated plan; any
 * other mismatch means this is not a plan file at all. */
static bool check_magic(reader *r)
{
    size_t have = r->len < 4 ? r->len : 4;
    if (memcmp(r->buf, PP_PLAN_MAGIC, have) == 0) {
        if (r->len == 0) {
            r->st = PP_PLAN_ETRUNC;
            set_err(r->err, r->errlen,
                    "truncated: the file is empty (expected a plan starting with \"%s\")",
                    PP_PLAN_MAGIC);
            return false;
        }
        if (!rd_need(r, 4, "the magic"))
            return false;
        r->pos = 4;
        return true;
    }
    char found[3 * 4 + 1] = "";
    for (size_t i = 0, at = 0; i < have; i++)
        at += (size_t)snprintf(found + at, sizeof found - at, "%s%02x", i ? " " : "", r->buf[i]);
    r->st = PP_PLAN_EMAGIC;
    set_err(r->err, r->errlen, "bad magic: expected \"%s\", found %s (not a pp plan file)",
            PP_PLAN_MAGIC, found);
    return false;
}

static bool check_version(reader *r, pp_plan *p)
{
    p->version = rd_u32(r, "the format version");
    if (!rd_ok(r))
        return false;
    if (p->version == PP_PLAN_VERSION)
        return true;
    r->st = PP_PLAN_EVERSION;
    set_err(r->err, r->errlen,
            "unsupported plan format version %" PRIu32 " (this reader knows version %u)",
            p->version, PP_PLAN_VERSION);
    return false;
}

static void read_header(reader *r, pp_plan *p)
{
    p->plan_id = rd_u64(r, "the header");
    p->rank = rd_u32(r, "the header");
    p->world = rd_u32(r, "the header");
    p->S = rd_u32(r, "the header");
    p->B = rd_u32(r, "the header");
    p->model.kind = rd_u32(r, "the model description");
    p->model.vocab = rd_u32(r, "the model description");
    p->model.context = rd_u32(r, "the model description");
    p->model.embed = rd_u32(r, "the model description");
    p->model.heads = rd_u32(r, "the model description");
    p->model.ffn = rd_u32(r, "the model description");
    p->model.blocks = rd_u32(r, "the model description");
    p->model.batch = rd_u32(r, "the model description");
    p->model.optimizer = rd_u32(r, "the model description");
    p->model.precision = rd_u32(r, "the model description");
    p->model.tensor = rd_u32(r, "the model description");
    p->model.kv_heads = rd_u32(r, "the model description");
    p->model.rope_theta = rd_u32(r, "the model description");
    uint32_t eps = rd_u32(r, "the model description");
    memcpy(&p->model.norm_eps, &eps, 4);
    p->model.tie = rd_u32(r, "the model description");
}

static void read_stage_roles(reader *r, pp_plan *p)
{
    if (!rd_need(r, p->S, "the stage roles"))
        return;
    p->stage_role = rd_alloc(r, p->S, 1, "the stage roles");
    for (uint32_t s = 0; s < p->S && rd_ok(r); s++)
        p->stage_role[s] = rd_u8(r, "the stage roles");
}

static void read_stage_layers(reader *r, pp_plan *p)
{
    if (!rd_need(r, (uint64_t)p->S * 4, "the stages' layer counts"))
        return;
    p->model.layers = rd_alloc(r, p->S, sizeof *p->model.layers, "the stages' layer counts");
    for (uint32_t s = 0; s < p->S && rd_ok(r); s++)
        p->model.layers[s] = rd_u32(r, "the stages' layer counts");
}

static void read_slots(reader *r, pp_plan *p)
{
    p->nslots = rd_u32(r, "the slot count");
    if (!rd_need(r, (uint64_t)p->nslots * 8, "the slot table"))
        return;
    p->slot_bytes = rd_alloc(r, p->nslots, sizeof *p->slot_bytes, "the slot table");
    for (uint32_t i = 0; i < p->nslots && rd_ok(r); i++)
        p->slot_bytes[i] = rd_u64(r, "the slot table");
    p->workspace_bytes = rd_u64(r, "the workspace size");
}

/* ngroups is checked against the 4-byte minimum per group before the table
 * is allocated; each member list is checked again against its own count. */
static void read_groups(reader *r, pp_plan *p)
{
    p->ngroups = rd_u32(r, "the group count");
    if (!rd_need(r, (uint64_t)p->ngroups * 4, "the group table"))
        return;
    p->groups = rd_alloc(r, p->ngroups, sizeof *p->groups, "the group table");
    for (uint32_t g = 0; g < p->ngroups && rd_ok(r); g++) {
        pp_group *grp = &p->groups[g];
        uint32_t n = rd_u32(r, "the group table");
        if (!rd_need(r, (uint64_t)n * 4, "the group table"))
            return;
        grp->member = rd_alloc(r, n, sizeof *grp->member, "a group's members");
        if (!rd_ok(r))
            return;
        grp->n = n; /* only now, so pp_plan_free never walks a missing list */
        for (uint32_t k = 0; k < n; k++)
            grp->member[k] = rd_u32(r, "the group table");
    }
}

static void read_code(reader *r, pp_plan *p)
{
    p->ninstr = rd_u32(r, "the instruction count");
    if (!rd_need(r, (uint64_t)p->ninstr * INSTR_BYTES, "the instruction table"))
        return;
    p->code = rd_alloc(r, p->ninstr, sizeof *p->code, "the instruction table");
    for (uint32_t i = 0; i < p->ninstr && rd_ok(r); i++) {
        pp_instr *in = &p->code[i];
        in->op = rd_u8(r, "the instruction table");
        in->stage = rd_i32(r, "the instruction table");
        in->mb = rd_i32(r, "the instruction table");
        in->peer = rd_i32(r, "the instruction table");
        in->group = rd_i32(r, "the instruction table");
        for (int k = 0; k < PP_MAX_SLOTS; k++)
            in->slot[k] = rd_i32(r, "the instruction table");
    }
}

/* The checksum covers every byte before it; then nothing may follow. */
static void check_tail(reader *r)
{
    size_t body = r->pos;
    uint32_t stored = rd_u32(r, "the checksum");
    if (!rd_ok(r))
        return;
    uint32_t computed = pp_crc32(r->buf, body);
    if (stored != computed) {
        r->st = PP_PLAN_ECRC;
        set_err(r->err, r->errlen,
                "checksum mismatch: stored crc32 0x%08" PRIx32 ", computed 0x%08" PRIx32
                " (file is corrupt)",
                stored, computed);
        return;
    }
    if (r->pos != r->len) {
        r->st = PP_PLAN_ETRAILING;
        set_err(r->err, r->errlen,
                "trailing bytes: the plan ends with its checksum at byte %zu but the file has %zu "
                "bytes (%zu extra; expected nothing after the checksum)",
                r->pos, r->len, r->len - r->pos);
    }
}

pp_plan_status pp_plan_decode(const uint8_t *buf, size_t len, pp_plan *p, char *err, size_t errlen)
{
    static const uint8_t empty[1] = {0};
    reader r = {buf ? buf : empty, buf ? len : 0, 0, PP_PLAN_OK, err, errlen};
    pp_plan q;
    memset(&q, 0, sizeof q);
    memset(p, 0, sizeof *p);
    set_err(err, errlen, "ok");
    if (check_magic(&r) && check_version(&r, &q)) {
        read_header(&r, &q);
        read_stage_roles(&r, &q);
        read_stage_layers(&r, &q);
        read_slots(&r, &q);
        read_groups(&r, &q);
        read_code(&r, &q);
        check_tail(&r);
    }
    if (rd_ok(&r))
        r.st = pp_plan_validate(&q, err, errlen);
    if (!rd_ok(&r)) {
        pp_plan_free(&q);
        return r.st;
    }
    *p = q;
    return PP_PLAN_OK;
}

/* ------------------------------------------------------------ file helpers */

/* Write to "<path>.tmp" and rename, so a reader never sees half a plan and a
 * failed write leaves any previous plan in place. */
pp_plan_status pp_plan_write(const pp_plan *p, const char *path, char *err, size_t errlen)
{
    uint8_t *buf;
    size_t len;
    if (pp_plan_encode(p, &buf, &len) != PP_PLAN_OK) {
        set_err(err, errlen, "%s: out of memory encoding the plan", path);
        return PP_PLAN_ENOMEM;
    }
    size_t tlen = strlen(path) + 5;
    char *tmp = malloc(tlen);
    if (!tmp) {
        free(buf);
        set_err(err, errlen, "%s: out of memory", path);
        return PP_PLAN_ENOMEM;
    }
    snprintf(tmp, tlen, "%s.tmp", path);
    pp_plan_status st = PP_PLAN_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = errno == ENOMEM ? PP_PLAN_ENOMEM : PP_PLAN_EIO;
        set_err(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        bool ok = fwrite(buf, 1, len, f) == len;
        int saved = errno;
        if (fclose(f) != 0 && ok) {
            ok = false;
            saved = errno;
        }
        if (!ok) {
            set_err(err, errlen, "%s: write failed: %s", tmp, strerror(saved));
            remove(tmp);
            st = PP_PLAN_EIO;
        } else if (rename(tmp, path) != 0) {
            set_err(err, errlen, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
            remove(tmp);
            st = PP_PLAN_EIO;
        }
    }
    free(tmp);
    free(buf);
    return st;
}

/* Read a whole stream into a malloc'd buffer (works for pipes too). */
static pp_plan_status slurp(FILE *f, uint8_t **out, size_t *outlen)
{
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return PP_PLAN_ENOMEM;
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            return PP_PLAN_ENOMEM;
        }
        buf = bigger;
        cap *= 2;
    }
    if (ferror(f)) {
        free(buf);
        return PP_PLAN_EIO;
    }
    *out = buf;
    *outlen = n;
    return PP_PLAN_OK;
}

pp_plan_status pp_plan_read(const char *path, pp_plan *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    const char *kind;
    long long size = 0;
    FILE *f = pp_open_regular(path, &kind, &size); /* never blocks on a FIFO */
    if (!f) {
        if (kind)
            set_err(err, errlen,
                    "%s: is %s, not a plan file (expected a rank<r>.bin that ppc wrote)", path,
                    kind);
        else
            set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return PP_PLAN_EIO;
    }
    if (size == 0) {
        fclose(f);
        set_err(err, errlen, "%s: the file is empty (expected a plan that ppc wrote)", path);
        return PP_PLAN_EIO;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    pp_plan_status st = slurp(f, &buf, &len);
    int saved = errno;
    fclose(f);
    if (st != PP_PLAN_OK) {
        set_err(err, errlen, "%s: %s", path,
                st == PP_PLAN_EIO ? strerror(saved) : "out of memory reading the file");
        return st;
    }
    char msg[512];
    st = pp_plan_decode(buf, len, p, msg, sizeof msg);
    free(buf);
    if (st != PP_PLAN_OK)
        set_err(err, errlen, "%s: %s", path, msg);
    return st;
}

/* -------------------------------------------------------------- validation */

/* A header or group check: on failure say what is wrong and return EHEADER. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            set_err(err, errlen, __VA_ARGS__);                                                     \
            return PP_PLAN_EHEADER;                                                                \
        }                                                                                          \
    } while (0)

static pp_plan_status check_header(const pp_plan *p, char *err, size_t errlen)
{
    if (p->version != PP_PLAN_VERSION) {
        set_err(err, errlen,
                "unsupported plan format version %" PRIu32 " (this reader knows version %u)",
                p->version, PP_PLAN_VERSION);
        return PP_PLAN_EVERSION;
    }
    REQUIRE(p->world >= 1, "header: world is 0 (expected at least 1 rank)");
    REQUIRE(p->rank < p->world,
            "header: rank %" PRIu32 " out of range [0, %" PRIu32 ") (world is %" PRIu32 ")",
            p->rank, p->world, p->world);
    REQUIRE(p->S >= 1, "header: S is 0 (expected at least 1 stage)");
    REQUIRE(p->B >= 1, "header: B is 0 (expected at least 1 microbatch)");
    REQUIRE(p->model.kind < PP_MODEL_COUNT,
            "model: kind %" PRIu32 " is unknown (expected 0 for mlp, 1 for gpt or 2 for llama)",
            p->model.kind);
    REQUIRE(p->model.context >= 1 && p->model.context <= PP_MAX_CONTEXT,
            "model: context is %" PRIu32 " (expected 1 to %u tokens)", p->model.context,
            PP_MAX_CONTEXT);
    REQUIRE(p->model.embed >= 1 && p->model.embed <= PP_MAX_EMBED,
            "model: embed is %" PRIu32 " (expected 1 to %u)", p->model.embed, PP_MAX_EMBED);
    if (p->model.kind == PP_MODEL_MLP) {
        REQUIRE(p->model.vocab == PP_VOCAB,
                "model: mlp vocab is %" PRIu32 " (expected %u: the mlp model reads bytes)",
                p->model.vocab, PP_VOCAB);
        REQUIRE(p->model.heads == 0, "model: mlp heads is %" PRIu32 " (expected 0)",
                p->model.heads);
    } else {
        REQUIRE(p->model.vocab >= 2 && p->model.vocab <= PP_MAX_VOCAB,
                "model: gpt vocab is %" PRIu32 " (expected 2 to %u)", p->model.vocab, PP_MAX_VOCAB);
        REQUIRE(p->model.heads >= 1 && p->model.heads <= PP_MAX_HEADS &&
                    p->model.embed % p->model.heads == 0,
                "model: gpt heads is %" PRIu32 " (expected 1 to %u, dividing embed %" PRIu32 ")",
                p->model.heads, PP_MAX_HEADS, p->model.embed);
    }
    REQUIRE(p->model.tie <= 1 && (p->model.tie == 0 || p->model.kind != PP_MODEL_MLP),
            "model: tie is %" PRIu32 " (expected 0, or 1 for gpt and llama)", p->model.tie);
    if (p->model.kind == PP_MODEL_LLAMA) {
        REQUIRE(p->model.kv_heads >= 1 && p->model.heads % p->model.kv_heads == 0,
                "model: llama kv_heads is %" PRIu32 " (expected 1 to heads %" PRIu32
                ", dividing it)",
                p->model.kv_heads, p->model.heads);
        REQUIRE((p->model.embed / p->model.heads) % 2 == 0,
                "model: llama head width embed/heads = %" PRIu32
                " is odd (expected even: rotary embeddings turn pairs)",
                p->model.embed / p->model.heads);
        REQUIRE(p->model.rope_theta >= 1, "model: llama rope_theta is 0 (expected at least 1)");
        REQUIRE(p->model.norm_eps > 0.0f && p->model.norm_eps < 1.0f,
                "model: llama norm_eps is %g (expected in (0, 1))", (double)p->model.norm_eps);
    } else {
        REQUIRE(p->model.kv_heads == 0 && p->model.rope_theta == 0 && p->model.norm_eps == 0.0f,
                "model: %s has llama's kv_heads, rope_theta or norm_eps set (expected 0)",
                pp_model_kind_name(p->model.kind));
    }
    REQUIRE(p->model.ffn >= 1 && p->model.ffn <= PP_MAX_FFN,
            "model: ffn is %" PRIu32 " (expected 1 to %u)", p->model.ffn, PP_MAX_FFN);
    REQUIRE(p->model.batch >= 1 && p->model.batch <= PP_MAX_BATCH,
            "model: batch is %" PRIu32 " (expected 1 to %u samples)", p->model.batch, PP_MAX_BATCH);
    REQUIRE(pp_model_widest_elems(&p->model) <= PP_MAX_TENSOR_ELEMS,
            "model: its widest activation tensor has %" PRIu64
            " elements (expected at most %llu: the kernels index with int)",
            pp_model_widest_elems(&p->model), PP_MAX_TENSOR_ELEMS);
    REQUIRE(p->model.optimizer < PP_OPT_COUNT,
            "model: optimizer %" PRIu32 " is unknown (expected 0 for sgd or 1 for adamw)",
            p->model.optimizer);
    REQUIRE(p->model.precision < PP_PREC_COUNT,
            "model: precision %" PRIu32 " is unknown (expected 0 for fp32 or 1 for bf16)",
            p->model.precision);
    /* tensor = T (issue 27): rank = worker * T + t, and T cuts what the
     * Megatron split cuts (compiler/schedule.c's check_tensor) */
    REQUIRE(p->model.tensor <= PP_MAX_TENSOR && p->world % pp_model_tensor(&p->model) == 0,
            "model: tensor is %" PRIu32 " (expected 1 to %u, dividing the world of %" PRIu32
            " ranks)",
            p->model.tensor, PP_MAX_TENSOR, p->world);
    REQUIRE(p->model.ffn % pp_model_tensor(&p->model) == 0 &&
                (p->model.kind != PP_MODEL_GPT || p->model.heads % pp_model_tensor(&p->model) == 0),
            "model: tensor %" PRIu32 " does not divide ffn %" PRIu32 "%s", p->model.tensor,
            p->model.ffn, p->model.kind == PP_MODEL_GPT ? " and heads (expected both split evenly)"
                                                        : " (expected an even split)");
    REQUIRE(p->model.kind != PP_MODEL_LLAMA || p->model.kv_heads % pp_model_tensor(&p->model) == 0,
            "model: tensor %" PRIu32 " does not divide kv_heads %" PRIu32
            " (expected the key/value heads split evenly)",
            p->model.tensor, p->model.kv_heads);
    REQUIRE(p->stage_role, "header: stage role table missing (expected %" PRIu32 " entries)", p->S);
    /* model.layers NULL (a plan built in memory) means `blocks` everywhere;
     * the decoder always fills it in. */
    uint64_t layers = 0;
    for (uint32_t s = 0; s < p->S; s++) {
        REQUIRE(pp_model_layers(&p->model, (int)s) <= PP_MAX_LAYERS,
                "model: stage %" PRIu32 " has %" PRIu32 " layers (expected at most %u)", s,
                pp_model_layers(&p->model, (int)s), PP_MAX_LAYERS);
        layers += pp_model_layers(&p->model, (int)s);
    }
    /* gpt_init sums them in an int (the residual projections' init scale) */
    REQUIRE(layers <= PP_MAX_TOTAL_LAYERS,
            "model: the stages have %" PRIu64 " layers in all (expected at most %llu)", layers,
            (unsigned long long)PP_MAX_TOTAL_LAYERS);
    REQUIRE(p->nslots == 0 || p->slot_bytes,
            "header: slot table missing (expected %" PRIu32 " entries)", p->nslots);
    REQUIRE(p->ngroups == 0 || p->groups,
            "header: group table missing (expected %" PRIu32 " entries)", p->ngroups);
    REQUIRE(p->ninstr == 0 || p->code,
            "header: instruction table missing (expected %" PRIu32 " entries)", p->ninstr);
    for (uint32_t s = 0; s < p->S; s++)
        REQUIRE(p->stage_role[s] <= (PP_ROLE_COMPUTE | PP_ROLE_OWNER),
                "stage %" PRIu32
                " has role 0x%02x (expected compute=1, owner=2 or both, at most 3)",
                s, p->stage_role[s]);
    for (uint32_t i = 0; i < p->nslots; i++)
        REQUIRE(p->slot_bytes[i] > 0, "slot s%" PRIu32 " has size 0 bytes (expected more than 0)",
                i);
    return PP_PLAN_OK;
}

static pp_plan_status check_groups(const pp_plan *p, char *err, size_t errlen)
{
    for (uint32_t g = 0; g < p->ngroups; g++) {
        const pp_group *grp = &p->groups[g];
        REQUIRE(grp->n >= 1, "group g%" PRIu32 " is empty (expected at least 1 member)", g);
        REQUIRE(grp->member, "group g%" PRIu32 ": member list missing (expected %" PRIu32 " ranks)",
                g, grp->n);
        for (uint32_t k = 0; k < grp->n; k++) {
            REQUIRE(grp->member[k] < p->world,
                    "group g%" PRIu32 ": member %" PRIu32 " is rank %" PRIu32
                    ", out of range [0, %" PRIu32 ")",
                    g, k, grp->member[k], p->world);
            REQUIRE(k == 0 || grp->member[k] > grp->member[k - 1],
                    "group g%" PRIu32 ": rank %" PRIu32 " follows rank %" PRIu32
                    " (expected ranks strictly ascending, no repeats)",
                    g, grp->member[k], grp->member[k - 1]);
        }
    }
    return PP_PLAN_OK;
}
#undef REQUIRE

/* One scalar operand: if the opcode uses it, it must lie in [0, hi);
 * otherwise it must be -1 so stray values never go unnoticed. */
static bool check_scalar(uint32_t i, const pp_instr *in, unsigned uses, unsigned use,
                         const char *what, int32_t v, uint32_t hi, char *err, size_t errlen)
{
    const char *name = pp_op_name(in->op);
    if (!(uses & use)) {
        if (v == -1)
            return true;
        set_err(err, errlen,
                "instruction %" PRIu32 " (%s): %s is %" PRId32 " but %s takes no %s (expected -1)",
                i, name, what, v, name, what);
        return false;
    }
    if (v >= 0 && (uint32_t)v < hi)
        return true;
    set_err(err, errlen,
            "instruction %" PRIu32 " (%s): %s %" PRId32 " out of range [0, %" PRIu32 ")", i, name,
            what, v, hi);
    return false;
}

static bool check_slots(uint32_t i, const pp_instr *in, uint32_t nslots, char *err, size_t errlen)
{
    const char *name = pp_op_name(in->op);
    const pp_op_info *o = pp_op(in->op); /* a known opcode: check_instr saw to it */
    int n = pp_op_nslots(in->op);
    for (int k = 0; k < PP_MAX_SLOTS; k++) {
        int32_t v = in->slot[k];
        /* pp_op_slot_role's answer, without its search per slot (a plan
         * of a million jobs has millions of instructions to check) */
        int optional = k < n ? o->slot[k].optional : 0;
        const char *role = k < n ? pp_role_name(o->slot[k].role) : NULL;
        if (k >= n) {
            if (v == -1)
                continue;
            set_err(err, errlen,
                    "instruction %" PRIu32 " (%s): slot operand %d is %" PRId32
                    " but %s takes %d slot%s "
                    "(expected -1)",
                    i, name, k, v, name, n, n == 1 ? "" : "s");
            return false;
        }
        if (v == -1 && optional)
            continue;
        if (v == -1) {
            set_err(err, errlen,
                    "instruction %" PRIu32
                    " (%s): required slot '%s' is missing (expected a slot in "
                    "[0, %" PRIu32 "))",
                    i, name, role, nslots);
            return false;
        }
        if (v < 0 || (uint32_t)v >= nslots) {
            set_err(err, errlen,
                    "instruction %" PRIu32 " (%s): slot '%s' is %" PRId32
                    ", out of range [0, %" PRIu32 ")%s",
                    i, name, role, v, nslots, optional ? " or -1" : "");
            return false;
        }
    }
    return true;
}

static bool check_instr(const pp_plan *p, uint32_t i, char *err, size_t errlen)
{
    const pp_instr *in = &p->code[i];
    if (in->op >= PP_OP_COUNT) {
        set_err(err, errlen, "instruction %" PRIu32 ": unknown opcode %u (expected 0..%d)", i,
                in->op, PP_OP_COUNT - 1);
        return false;
    }
    unsigned uses = pp_op_uses(in->op);
    if (!check_scalar(i, in, uses, PP_U_STAGE, "stage", in->stage, p->S, err, errlen) ||
        !check_scalar(i, in, uses, PP_U_MB, "mb", in->mb, p->B, err, errlen) ||
        !check_scalar(i, in, uses, PP_U_PEER, "peer", in->peer, p->world, err, errlen) ||
        !check_scalar(i, in, uses, PP_U_GROUP, "group", in->group, p->ngroups, err, errlen))
        return false;
    if ((uses & PP_U_PEER) && (uint32_t)in->peer == p->rank) {
        set_err(err, errlen,
                "instruction %" PRIu32 " (%s): peer %" PRId32
                " is this rank (expected another rank)",
                i, pp_op_name(in->op), in->peer);
        return false;
    }
    return check_slots(i, in, p->nslots, err, errlen);
}

/* GroupStart .. GroupEnd: not nested, closed, and holding at least one
 * transfer, all of them pp_group_direction's, in one direction (one stream
 * and one NCCL communicator on the cuda backend). */
static bool check_transfer_groups(const pp_plan *p, char *err, size_t errlen)
{
    int64_t open = -1; /* the open GroupStart */
    int dir = -1, n = 0;
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        if (in->op == PP_OP_GroupStart) {
            if (open >= 0) {
                set_err(err, errlen,
                        "instruction %" PRIu32 " (GroupStart): the group opened at %" PRId64
                        " is not closed (expected GroupEnd first; groups do not nest)",
                        i, open);
                return false;
            }
            open = i, dir = -1, n = 0;
        } else if (in->op == PP_OP_GroupEnd) {
            if (open < 0 || n == 0) {
                set_err(err, errlen, "instruction %" PRIu32 " (GroupEnd): %s", i,
                        open < 0 ? "no group is open (expected a GroupStart before it)"
                                 : "the group is empty (expected at least one transfer)");
                return false;
            }
            open = -1;
        } else if (open >= 0) {
            int up = pp_group_direction(in, p->rank);
            if (up < 0 || (dir >= 0 && up != dir)) {
                set_err(
                    err, errlen,
                    "instruction %" PRIu32 " (%s) inside the group opened at %" PRId64 ": %s", i,
                    pp_op_name(in->op), open,
                    up < 0 ? "a group holds only point-to-point transfers other than RecvWeightGrad"
                           : "its data moves the other way (a group holds transfers of one "
                             "direction)");
                return false;
            }
            dir = up, n++;
        }
    }
    if (open >= 0) {
        set_err(err, errlen,
                "the group opened at instruction %" PRId64 " is not closed (expected GroupEnd)",
                open);
        return false;
    }
    return true;
}

static bool is_pair_job(const pp_instr *in, int fwd)
{
    pp_op_job j = pp_op_job_of(in->op);
    return fwd ? j == PP_JOB_F : j == PP_JOB_B || j == PP_JOB_BI;
}

/* Overlap: the next two jobs are a Forward and a Backward (or
 * BackwardInput) of different microbatches, in either order, outside any
 * transfer group (a group holds only transfers anyway); under tensor > 1
 * each right after its TensorReduce (isa/tensor_lane.h; check_tensor_reduces
 * holds them to it), else right after the marker. */
static bool check_overlaps(const pp_plan *p, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < p->ninstr; i++) {
        if (p->code[i].op != PP_OP_Overlap)
            continue;
        uint32_t a, b;
        const pp_instr *x = pp_pair_jobs(p, i, &a, &b) ? &p->code[a] : NULL,
                       *y = x ? &p->code[b] : NULL;
        bool ok = x && ((is_pair_job(x, 1) && is_pair_job(y, 0)) ||
                        (is_pair_job(x, 0) && is_pair_job(y, 1)));
        if (!ok) {
            set_err(err, errlen,
                    "instruction %" PRIu32 " (Overlap): expected a Forward and a Backward or "
                    "BackwardInput right after it%s, found %s",
                    i,
                    pp_model_tensor(&p->model) > 1
                        ? " (each after its TensorReduce under tensor > 1)"
                        : "",
                    !x ? "the end of the plan" : "other instructions");
            return false;
        }
        if (x->mb == y->mb) {
            set_err(err, errlen,
                    "instruction %" PRIu32 " (Overlap): its pair is of one microbatch (%" PRId32
                    "), whose backward needs the forward (expected two microbatches)",
                    i, x->mb);
            return false;
        }
        i = b;
    }
    return true;
}

/* TensorReduce (issue 27, isa/tensor.h): under tensor = T > 1 every
 * Forward, Backward, BackwardInput and Recompute (a re-run forward makes
 * the forward's all-reduces) comes right after one of its stage
 * and microbatch, whose group is T ranks holding this one; with T = 1
 * there is none. */
static bool check_tensor_reduces(const pp_plan *p, char *err, size_t errlen)
{
    uint32_t T = pp_model_tensor(&p->model);
    for (uint32_t i = 0; i < p->ninstr; i++) {
        const pp_instr *in = &p->code[i];
        pp_op_job j = pp_op_job_of(in->op);
        bool job = j == PP_JOB_F || j == PP_JOB_B || j == PP_JOB_BI || j == PP_JOB_R;
        if (in->op == PP_OP_TensorReduce) {
            const pp_instr *x = i + 1 < p->ninstr ? in + 1 : NULL;
            pp_op_job xj = x ? pp_op_job_of(x->op) : PP_JOB_NONE;
            const pp_group *g = &p->groups[in->group];
            bool member = false;
            for (uint32_t k = 0; k < g->n; k++)
                member |= g->member[k] == p->rank;
            bool xjob = xj == PP_JOB_F || xj == PP_JOB_B || xj == PP_JOB_BI || xj == PP_JOB_R;
            if (T < 2 || !x || !xjob ||
                x->stage != in->stage || x->mb != in->mb || g->n != T || !member) {
                set_err(err, errlen,
                        "instruction %" PRIu32 " (TensorReduce): %s", i,
                        T < 2 ? "the plan is not tensor-parallel (tensor is 1)"
                        : !x || !xjob
                            ? "expected a Forward, Backward, BackwardInput or Recompute right "
                              "after it"
                        : x->stage != in->stage || x->mb != in->mb
                            ? "the job after it is of another stage or microbatch"
                            : "its group is not this rank's tensor group of tensor ranks");
                return false;
            }
        } else if (job && T > 1 && (i == 0 || p->code[i - 1].op != PP_OP_TensorReduce)) {
            set_err(err, errlen,
                    "instruction %" PRIu32 " (%s): a tensor-parallel job without a "
                    "TensorReduce right before it (expected one naming its all-reduces)",
                    i, pp_op_name(in->op));
            return false;
        }
    }
    return true;
}

uint32_t pp_plan_workspaces(const pp_plan *p)
{
    for (uint32_t i = 0; i < p->ninstr; i++)
        if (p->code[i].op == PP_OP_Overlap)
            return 2;
    return 1;
}

pp_plan_status pp_plan_validate(const pp_plan *p, char *err, size_t errlen)
{
    pp_plan_status st = check_header(p, err, errlen);
    if (st == PP_PLAN_OK)
        st = check_groups(p, err, errlen);
    if (st != PP_PLAN_OK)
        return st;
    for (uint32_t i = 0; i < p->ninstr; i++)
        if (!check_instr(p, i, err, errlen))
            return PP_PLAN_EOPERAND;
    if (!check_transfer_groups(p, err, errlen) || !check_overlaps(p, err, errlen) ||
        !check_tensor_reduces(p, err, errlen))
        return PP_PLAN_EOPERAND;
    set_err(err, errlen, "ok");
    return PP_PLAN_OK;
}

void pp_plan_free(pp_plan *p)
{
    if (!p)
        return;
    if (p->groups)
        for (uint32_t g = 0; g < p->ngroups; g++)
            free(p->groups[g].member);
    free(p->stage_role);
    free(p->model.layers);
    free(p->slot_bytes);
    free(p->groups);
    free(p->code);
    memset(p, 0, sizeof *p);
}

int pp_plan_set_model(pp_plan *p, const pp_model *m)
{
    uint32_t *layers = malloc((p->S ? p->S : 1) * sizeof *layers);
    if (!layers)
        return -1;
    for (uint32_t s = 0; s < p->S; s++)
        layers[s] = pp_model_layers(m, (int)s);
    p->model = *m;
    p->model.layers = layers;
    return 0;
}
