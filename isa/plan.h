/* plan.h - the plan file: one rank's instruction stream and everything the VM
 * needs to run it without guessing.
 *
 * Layout (all integers little-endian):
 *   "PPLN"  u32 version  u64 plan_id  u32 rank  u32 world  u32 S  u32 B
 *   model: u32 kind (pp_model_kind), vocab, context, embed, heads, ffn, blocks,
 *          batch, optimizer (pp_optimizer), precision (pp_precision), tensor
 *   u8 stage_role[S]                      (PP_ROLE_* bits for this rank)
 *   u32 stage_layers[S]                   (pp_model_layers of each stage)
 *   u32 nslots, u64 slot_bytes[nslots], u64 workspace_bytes
 *   u32 ngroups, per group: u32 n, u32 member[n]   (ranks, ascending)
 *   u32 ninstr, per instruction: u8 opcode, i32 stage, mb, peer, group,
 *                                i32 slot[PP_MAX_SLOTS]
 *   u32 crc32 (IEEE) of every byte before it
 * The plan id is shared by all ranks of one compile, so the VM can refuse a
 * directory that mixes plans. */
#ifndef PP_PLAN_H
#define PP_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model_desc.h"
#include "ops.h"

#define PP_PLAN_MAGIC "PPLN"
#define PP_PLAN_VERSION                                                                            \
    8u /* 2: five slot operands, weight fetch opcodes; 3: optimizer;
                              4: precision; 5: workspace; 6: model kind, vocab, heads,
                              per-stage layers; 7: Overlap (a second workspace);
                              8: Recompute; tensor (model) and TensorReduce; llama's
                              kv_heads, rope_theta, norm_eps; tie; the tied
                              embedding's four opcodes; Offload, Reload (host slots:
                              pp_plan_host_slots) */

/* stage_role bits */
#define PP_ROLE_COMPUTE 1u /* this rank runs jobs of the stage */
#define PP_ROLE_OWNER 2u   /* this rank holds the stage's weights (source of truth or replica) */

typedef struct {
    uint32_t n;
    uint32_t *member;
} pp_group;

typedef struct {
    uint32_t version;
    uint64_t plan_id;
    uint32_t rank, world, S, B;
    pp_model model;
    uint8_t *stage_role; /* [S] */
    uint32_t nslots;
    uint64_t *slot_bytes; /* [nslots] */
    /* One scratch buffer that every F and B of the rank uses in turn (the
     * stages' pp_stage_workspace_bytes, at least, for each stage it runs);
     * allocated once, beside the slots. A plan with an Overlap pair has a
     * second one of the same size (pp_plan_workspaces), for the pair's
     * second job, which the cuda backend runs beside the first. */
    uint64_t workspace_bytes;
    uint32_t ngroups;
    pp_group *groups; /* [ngroups] */
    uint32_t ninstr;
    pp_instr *code; /* [ninstr] */
} pp_plan;

typedef enum {
    PP_PLAN_OK = 0,
    PP_PLAN_EIO,       /* cannot open or read the file */
    PP_PLAN_EMAGIC,    /* not a plan file */
    PP_PLAN_EVERSION,  /* a format version this reader does not know */
    PP_PLAN_ETRUNC,    /* the file ends before its content does */
    PP_PLAN_ECRC,      /* checksum mismatch: the file is corrupt */
    PP_PLAN_ETRAILING, /* bytes after the checksum */
    PP_PLAN_EHEADER,   /* a header field is out of range */
    PP_PLAN_EOPERAND,  /* an instruction operand is out of range */
    PP_PLAN_ENOMEM
} pp_plan_status;

/* Encode to a malloc'd buffer (the CRC is appended). Returns PP_PLAN_OK or ENOMEM. */
pp_plan_status pp_plan_encode(const pp_plan *p, uint8_t **buf, size_t *len);
/* Decode and validate. On failure fills err with what is wrong and what was
 * expected, leaves *p empty, and returns the status. Never reads out of bounds. */
pp_plan_status pp_plan_decode(const uint8_t *buf, size_t len, pp_plan *p, char *err, size_t errlen);
pp_plan_status pp_plan_write(const pp_plan *p, const char *path, char *err, size_t errlen);
pp_plan_status pp_plan_read(const char *path, pp_plan *p, char *err, size_t errlen);
/* Operand and header range checks (decode runs them; the compiler runs them
 * before writing). */
pp_plan_status pp_plan_validate(const pp_plan *p, char *err, size_t errlen);
void pp_plan_free(pp_plan *p);
/* p->model = *m, with a layer count table of its own (p->S entries, which
 * pp_plan_free frees). Returns 0, or -1 out of memory. */
int pp_plan_set_model(pp_plan *p, const pp_model *m);

/* How many workspaces of workspace_bytes the plan needs: 2 when it holds
 * an Overlap pair, else 1. */
uint32_t pp_plan_workspaces(const pp_plan *p);

/* Offload's host slots (isa/hostslots.c): host[k] = 1 for every slot k
 * that holds a stash on the host (an Offload's dst, a Reload's src), 0 for
 * the device slots; host has p->nslots entries. Returns how many are host
 * slots. pp_plan_host_bytes: their summed sizes. */
int pp_plan_host_slots(const pp_plan *p, uint8_t *host);
uint64_t pp_plan_host_bytes(const pp_plan *p, const uint8_t *host);

/* The one message tag scheme of every transport (the cpu backend's and the
 * cuda backend's MPI transfers): the tag of a point-to-point message of
 * opcode op (either end of the pair) for stage s, microbatch b, is
 * (s*B + b) * PP_TAG_CLASSES + op's tag class (isa/opcodes.h), b counted
 * only for an opcode that names a microbatch. MPI keeps messages of one
 * (source, tag) in order, which is the order both sides' plans list them
 * in, so the tag only has to tell classes and jobs apart. -1 for an opcode
 * that sends no point-to-point message. */
int pp_transfer_tag(const pp_plan *p, int op, int s, int b);
/* One more than the largest tag pp_transfer_tag gives p's messages,
 * S*B*PP_TAG_CLASSES: ppvm refuses a plan for which this exceeds MPI's
 * largest tag. */
long long pp_transfer_tags(const pp_plan *p);

/* The fixed-column listing (rank<r>.txt). */
void pp_plan_disasm(const pp_plan *p, FILE *out);

/* CRC-32 (IEEE, as zlib, gzip and PNG compute it: zlib's crc32_z) of the
 * plan and weight files. */
uint32_t pp_crc32(const uint8_t *buf, size_t len);
/* The plan id of plans[0..W): a hash of everything each rank's plan says
 * but its rank and plan id (header, model and layer table, stage roles,
 * slot table, group table, every operand). ppc stamps it into every rank's
 * file; ppvm recomputes it at start-up from the plans all ranks loaded, so
 * an edit to any one file (its CRC fixed or not) changes it. */
uint64_t pp_plans_id(const pp_plan *plans, int W);
uint64_t pp_fnv1a64(uint64_t h, const void *data, size_t len);
#define PP_FNV_OFFSET 14695981039346656037ull

#endif
