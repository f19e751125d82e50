/* opcodes.h - the one table of pp's instructions: what each one is and does.
 *
 * Everything else that needs to know what an instruction is derives it from
 * this list (X-macro): the enum, the names, the decoder's operand checks,
 * the listing's operand names and comments, which instructions are
 * transfers and what pairs with what (the deadlock checker,
 * isa/commcheck.c), which way a transfer's data flows and so which stream
 * carries it (grouping, the cuda backend), which buffers an instruction
 * reads and writes (the buffer-safety verifier, isa/bufcheck.c; the plan
 * checks, isa/plancheck.c), which job it runs (isa/verify.c, the profile),
 * its benchmark family (ppvm --no-compute) and its message tag
 * (pp_transfer_tag). No file outside the device layers switches on
 * opcodes. So adding an instruction is a row here (and the PP_PLAN_VERSION
 * bump), its lowering and one case per device layer (isa/README.md lists
 * them); tests/unit/test_plan.c walks the table and fails when a property
 * is missing or inconsistent, and fails when an existing number moves.
 *
 * PP_OP(Name, number, kind, pairs, lane, uses, params, grads, job, family, tag, slots,
 *       synopsis, comment)
 *   number   the opcode's byte in the plan file: pinned, append-only; a new
 *            instruction takes the next number and bumps PP_PLAN_VERSION.
 *   kind     COMPUTE (a job: F, B, W), LOCAL (rank-local work), SEND, RECV
 *            (point-to-point transfers), COLLECTIVE, MARKER (no work).
 *   pairs    for a transfer, the opcode on the peer's side that it matches.
 *   lane     where it runs: COMPUTE (the compute stream), FLOW (a transfer's
 *            stream, chosen by which way its data flows: UP from a lower
 *            rank to a higher one, DOWN otherwise; pp_op_flow), GROUPABLE
 *            (a FLOW transfer that may stand inside GroupStart..GroupEnd),
 *            NONE (markers).
 *   uses     the scalar operands it reads: PP_U_STAGE, PP_U_MB
 *            (microbatch), PP_U_PEER (another rank), PP_U_GROUP (an entry of
 *            the plan's group table); unused ones are -1.
 *   params   how it touches the rank's own copy of stage s's weights (and
 *   grads    their bf16 compute copy) and its own gradients of stage s: NO,
 *            RD (reads), WR (writes), UP (reads and writes: accumulates, or
 *            updates in place). An instruction with a `wts` slot touches the
 *            own weights only when that slot is absent (it then computes with
 *            the rank's own stage); one with a `wgrad` slot, the own
 *            gradients only when that slot is absent.
 *   job      the job it runs: F, B (a whole backward), BI (backward input),
 *            W (backward weight) of (s,b), O (stage s's optimizer step, no
 *            job of a microbatch), R (a re-run forward that rebuilds F's
 *            stash, recompute), NONE. A COMPUTE instruction runs one of
 *            F, B, BI, W; the verifier counts them, the profile times them.
 *   family   the row ppvm --no-compute reports it under: COMPUTE, OPTIMIZER,
 *            TRANSFER (activations and gradients), WEIGHTS (weights and
 *            weight gradients), COLLECTIVE, BOOKKEEPING.
 *   tag      a point-to-point transfer's message class (ACT, GRAD, WEIGHTS,
 *            WGRAD; NONE for the rest): a pair's two ends share it, and
 *            pp_transfer_tag makes the MPI tag from it, the stage and the
 *            microbatch.
 *   slots    its buffer-slot operands in file order, at most PP_MAX_SLOTS:
 *            REQ(role, access, content, stage offset) or OPT(...) for one
 *            that may be -1 (absent); LAST(...), NOTLAST(...), NOTFIRST(...)
 *            for one present exactly on the last stage, on every stage but
 *            the last, on every stage but the first (isa/plancheck.c holds
 *            every plan to it); UPD(role, content, becomes, offset)
 *            reads content and leaves `becomes` (BackwardInput turns F's
 *            stash into one only W may read). The content is what the slot holds
 *            when the instruction reads it or after it writes it, named by
 *            the job that produced it: e.g. Forward's `in` is ACT at stage
 *            s-1, F(s-1,b)'s output (ACT at stage -1 is the microbatch's
 *            TOKENS). WTS, WGRAD and TMP are per stage, the others per
 *            (stage, microbatch).
 *   synopsis one line for isa/README.md's table.
 *   comment  the listing's comment column, a template the disassembler
 *            fills from the operands (isa/comment.c): {s} {b} {p} {g} the
 *            stage, microbatch, peer and group; {members} group g's ranks;
 *            {optimizer} the plan's optimizer; {next} and {dir} the size and
 *            direction of the transfer group that follows; {role} the slot
 *            of that role as "s4" ("?" when absent, or {role|text} for other
 *            text); [?role:...] what follows only when the slot is present
 *            (not -1), [!role:...] only when it is absent, [+role:...] only
 *            when it is a slot number (>= 0). Brackets nest.
 *
 * Stage/microbatch of a transfer name the job that PRODUCED the data:
 * SendActivation s b carries the output of F(s,b) to the rank running
 * F(s+1,b); SendGrad s b carries B(s,b)'s input gradient to the rank running
 * B(s-1,b).
 *
 * Weights: a job computing away from its stage's owner reads the weights
 * from its `wts` slot (filled by FetchWeights) and accumulates weight
 * gradients into its `wgrad` slot, which SendWeightGrad returns to the owner
 * at the end of the step.
 *
 * GroupStart/GroupEnd bracket GROUPABLE transfers that the rank posts one
 * after another in the same direction (pp_group_direction): the cuda
 * backend gives each direction its own stream and NCCL communicator, and
 * posts a bracket as one ncclGroupStart/End, so its transfers progress
 * together instead of each waiting for the one before. Members of a group
 * are concurrent: no two may touch one buffer unless both only read it
 * (isa/bufcheck.c proves it of every plan). RecvWeightGrad is FLOW but
 * not GROUPABLE: it adds what arrives to the gradients, a computation that
 * must wait for the data, so it cannot be deferred to a group's end.
 *
 * Overlap marks the two instructions right after it, a Forward and a
 * Backward or BackwardInput of another microbatch (either first), as one
 * overlapped pair (`overlap F with B when ...`, compiler/sim.h): the cuda
 * backend runs them at once on two compute streams, each with a workspace
 * of its own; the cpu backend runs them one after the other. Like a
 * group's members they are concurrent: neither may write a buffer the
 * other touches (isa/bufcheck.c). Under tensor > 1 each of the two jobs
 * comes right after its TensorReduce (Overlap, TensorReduce, job,
 * TensorReduce, job), the second one's all-reduces on its tensor group's
 * lane 1 communicator (isa/tensor_lane.h). */
#ifndef PP_OPCODES_H
#define PP_OPCODES_H

#define PP_U_STAGE 1u
#define PP_U_MB 2u
#define PP_U_PEER 4u
#define PP_U_GROUP 8u

/* clang-format off */
#define PP_OPCODES(X)                                                                            \
    X(LoadMicroBatch, 0, LOCAL, NONE, COMPUTE, PP_U_MB, NO, NO, NONE, BOOKKEEPING, NONE,         \
      (REQ(TOKENS, WR, TOKENS, 0)),                                                              \
      "read microbatch b's windows and targets into a slot",                                     \
      "microbatch {b} tokens into {tokens}")                                                     \
    X(Forward, 1, COMPUTE, NONE, COMPUTE, PP_U_STAGE | PP_U_MB, RD, NO, F, COMPUTE, NONE,        \
      (REQ(IN, RD, ACT, -1), REQ(STASH, WR, STASH, 0),                                           \
       NOTLAST(OUT, WR, ACT, 0), LAST(TGT, RD, TOKENS, 0),                                       \
       OPT(WTS, RD, WTS, 0)),                                                                    \
      "run F(s,b): read in, save what B needs in stash, write out (loss on the last stage)",     \
      "F({s},{b}): [?out:[?tgt:{in} -> {out}, loss vs targets {tgt}][!tgt:{in} -> {out}]]"       \
      "[!out:[?tgt:loss of {in} vs targets {tgt}][!tgt:{in}, output discarded]]"                 \
      " (stash {stash})[+wts: with weights {wts}]")                                              \
    X(SendActivation, 2, SEND, RecvActivation, GROUPABLE,                                        \
      PP_U_STAGE | PP_U_MB | PP_U_PEER, NO, NO, NONE, TRANSFER, ACT,                             \
      (REQ(SRC, RD, ACT, 0)),                                                                    \
      "send F(s,b)'s output to the rank that runs F(s+1,b)",                                     \
      "F({s},{b}) output {src} to rank {p}")                                                     \
    X(RecvActivation, 3, RECV, SendActivation, GROUPABLE,                                        \
      PP_U_STAGE | PP_U_MB | PP_U_PEER, NO, NO, NONE, TRANSFER, ACT,                             \
      (REQ(DST, WR, ACT, 0)),                                                                    \
      "receive F(s,b)'s output from the rank that ran it",                                       \
      "F({s},{b}) output from rank {p} into {dst}")                                              \
    X(Backward, 4, COMPUTE, NONE, COMPUTE, PP_U_STAGE | PP_U_MB, RD, UP, B, COMPUTE, NONE,       \
      (REQ(STASH, RD, STASH, 0),                                                                 \
       NOTLAST(DOUT, RD, GRAD, 1), NOTFIRST(DIN, WR, GRAD, 0), OPT(WTS, RD, WTS, 0),             \
       OPT(WGRAD, UP, WGRAD, 0)),                                                                \
      "run B(s,b): accumulate weight gradients, write the input gradient to din",                \
      "B({s},{b}): grad {dout|of loss} -> {din|weights only}"                                    \
      " (stash {stash})[+wts: with weights {wts}]"                                               \
      "[+wgrad:, weight grads into {wgrad}]")                                                    \
    X(BackwardInput, 5, COMPUTE, NONE, COMPUTE, PP_U_STAGE | PP_U_MB, RD, NO, BI, COMPUTE, NONE, \
      (UPD(STASH, STASH, STASHW, 0), NOTLAST(DOUT, RD, GRAD, 1), NOTFIRST(DIN, WR, GRAD, 0),     \
       OPT(WTS, RD, WTS, 0)),                                                                    \
      "split backward, B(s,b): write the input gradient to din, keep in stash what W needs",     \
      "B({s},{b}): grad {dout|of loss} -> {din|stash only}"                                      \
      " (stash {stash})[+wts: with weights {wts}]"                                               \
      "; weight grads left for W")                                                               \
    X(BackwardWeight, 6, COMPUTE, NONE, COMPUTE, PP_U_STAGE | PP_U_MB, NO, UP, W, COMPUTE, NONE, \
      (REQ(STASH, RD, STASHW, 0), OPT(WGRAD, UP, WGRAD, 0)),                                     \
      "split backward, W(s,b): accumulate stage s's weight gradients from the stash",            \
      "W({s},{b}): weight grads from stash {stash}[+wgrad: into {wgrad}]")                       \
    X(SendGrad, 7, SEND, RecvGrad, GROUPABLE,                                                    \
      PP_U_STAGE | PP_U_MB | PP_U_PEER, NO, NO, NONE, TRANSFER, GRAD,                            \
      (REQ(SRC, RD, GRAD, 0)),                                                                   \
      "send B(s,b)'s input gradient to the rank that runs B(s-1,b)",                             \
      "B({s},{b}) input grad {src} to rank {p}")                                                 \
    X(RecvGrad, 8, RECV, SendGrad, GROUPABLE,                                                    \
      PP_U_STAGE | PP_U_MB | PP_U_PEER, NO, NO, NONE, TRANSFER, GRAD,                            \
      (REQ(DST, WR, GRAD, 0)),                                                                   \
      "receive B(s,b)'s input gradient from the rank that ran it",                               \
      "B({s},{b}) input grad from rank {p} into {dst}")                                          \
    X(FetchWeights, 9, RECV, SendWeights, GROUPABLE,                                             \
      PP_U_STAGE | PP_U_PEER, NO, NO, NONE, WEIGHTS, WEIGHTS,                                    \
      (REQ(WTS, WR, WTS, 0)),                                                                    \
      "receive stage s's weights from their owner, for jobs that compute away from it",          \
      "stage {s} weights from rank {p} into {wts}")                                              \
    X(SendWeights, 10, SEND, FetchWeights, GROUPABLE,                                            \
      PP_U_STAGE | PP_U_PEER, RD, NO, NONE, WEIGHTS, WEIGHTS,                                    \
      (),                                                                                        \
      "send stage s's weights (this rank owns them) to a rank that fetches them",                \
      "stage {s} weights to rank {p}")                                                           \
    X(ZeroGrads, 11, LOCAL, NONE, COMPUTE, PP_U_STAGE, NO, NO, NONE, BOOKKEEPING, NONE,          \
      (REQ(WGRAD, WR, WGRAD, 0)),                                                                \
      "clear a slot that will accumulate stage s's weight gradients on this non-owner rank",     \
      "{wgrad} accumulates stage {s} weight grads here")                                         \
    X(SendWeightGrad, 12, SEND, RecvWeightGrad, GROUPABLE,                                       \
      PP_U_STAGE | PP_U_PEER, NO, NO, NONE, WEIGHTS, WGRAD,                                      \
      (REQ(WGRAD, RD, WGRAD, 0)),                                                                \
      "send the stage s weight gradients accumulated here to the stage's owner",                 \
      "stage {s} weight grads {wgrad} to owner rank {p}")                                        \
    X(RecvWeightGrad, 13, RECV, SendWeightGrad, FLOW,                                            \
      PP_U_STAGE | PP_U_PEER, NO, UP, NONE, WEIGHTS, WGRAD,                                      \
      (REQ(TMP, WR, TMP, 0)),                                                                    \
      "receive stage s weight gradients from a rank that computed with them; add them to ours",  \
      "stage {s} weight grads from rank {p} via {tmp}, added to ours")                           \
    X(ReduceGrads, 14, COLLECTIVE, NONE, COMPUTE,                                                \
      PP_U_STAGE | PP_U_GROUP, NO, UP, NONE, COLLECTIVE, NONE,                                   \
      (),                                                                                        \
      "all-reduce stage s's weight gradients among the replicas in group g",                     \
      "all-reduce stage {s} grads over g{g} {members}")                                          \
    X(OptimizerStep, 15, LOCAL, NONE, COMPUTE, PP_U_STAGE, UP, UP, O, OPTIMIZER, NONE,           \
      (),                                                                                        \
      "apply the optimizer to stage s's weights and clear its gradients",                        \
      "update stage {s} weights ({optimizer})")                                                  \
    X(GroupStart, 16, MARKER, NONE, NONE, 0u, NO, NO, NONE, BOOKKEEPING, NONE,                   \
      (),                                                                                        \
      "post the transfers up to GroupEnd together (one NCCL group)",                             \
      "the next {next} transfers ({dir}) are posted together")                                   \
    X(GroupEnd, 17, MARKER, NONE, NONE, 0u, NO, NO, NONE, BOOKKEEPING, NONE,                     \
      (),                                                                                        \
      "end of a group of transfers",                                                             \
      "end of the group")                                                                        \
    X(Overlap, 18, MARKER, NONE, NONE, 0u, NO, NO, NONE, BOOKKEEPING, NONE,                      \
      (),                                                                                        \
      "run the next two jobs, a Forward and a Backward (or BackwardInput), as one pair",         \
      "the next two jobs run as one pair (cuda: two streams; cpu: in turn)")                     \
    /* ---- recomputation (issue 26: `recompute when`, compiler/jobs.h) ---- */                 \
    X(Recompute, 19, COMPUTE, NONE, COMPUTE, PP_U_STAGE | PP_U_MB, RD, NO, R, COMPUTE, NONE,     \
      (REQ(IN, RD, ACT, -1), REQ(STASH, WR, STASH, 0),                                           \
       NOTLAST(OUT, WR, ACT, 0), LAST(TGT, RD, TOKENS, 0),                                       \
       OPT(WTS, RD, WTS, 0)),                                                                    \
      "R(s,b): re-run F(s,b) from its kept input to rebuild the stash B needs (no loss counted)", \
      "R({s},{b}): rebuild stash {stash} from {in}"                                              \
      "[?out: (output {out} discarded)][?tgt: (targets {tgt})][+wts: with weights {wts}]") \
    /* tensor parallelism (issue 27, isa/tensor.h) */                                            \
    X(TensorReduce, 20, COLLECTIVE, NONE, COMPUTE,                                            \
      PP_U_STAGE | PP_U_MB | PP_U_GROUP, NO, NO, NONE, COLLECTIVE, NONE,                         \
      (),                                                                                        \
      "the next job, F or B of (s,b), makes its tensor all-reduces over group g (per block)",    \
      "{tp} in the next job ({s},{b}) over tensor group g{g} {members}{lane}") \
    /* tied embeddings (model tie = 1): stage 0's wte and stage S-1's head are one tensor,       \
       each owner keeping a copy; both gradients are summed before either optimizer step */      \
    X(StashTiedGrad, 21, LOCAL, NONE, COMPUTE, PP_U_STAGE, NO, RD, NONE, BOOKKEEPING, NONE,      \
      (REQ(TMP, WR, TIED, 0)),                                                                   \
      "copy stage s's gradients of the tied embedding (its wte, or its head) into a slot",       \
      "stage {s} tied embedding grads into {tmp}")                                               \
    X(SendTiedGrad, 22, SEND, RecvTiedGrad, GROUPABLE, PP_U_STAGE | PP_U_PEER, NO, NO, NONE,     \
      WEIGHTS, TIED,                                                                             \
      (REQ(SRC, RD, TIED, 0)),                                                                   \
      "send stage s's tied embedding gradients to the owner of the other tied stage",            \
      "stage {s} tied embedding grads {src} to rank {p}")                                        \
    X(RecvTiedGrad, 23, RECV, SendTiedGrad, GROUPABLE, PP_U_STAGE | PP_U_PEER, NO, NO, NONE,     \
      WEIGHTS, TIED,                                                                             \
      (REQ(DST, WR, TIED, 0)),                                                                   \
      "receive stage s's tied embedding gradients from its owner",                               \
      "stage {s} tied embedding grads from rank {p} into {dst}")                                 \
    X(AddTiedGrad, 24, LOCAL, NONE, COMPUTE, PP_U_STAGE, NO, UP, NONE, BOOKKEEPING, NONE,        \
      (REQ(TMP, RD, TIED, 0)),                                                                   \
      "add the other tied stage's embedding gradients (a slot) to stage s's own",                \
      "stage {s} tied embedding grads += {tmp}") \
    /* ---- offload (issue 26: `offload when`). A host slot is one an Offload writes:  \
     * pp_plan_host_slots; the VM allocates it in host memory (pinned on cuda). ---- */ \
    X(Offload, 25, LOCAL, NONE, COMPUTE, PP_U_STAGE | PP_U_MB, NO, NO, NONE, BOOKKEEPING, NONE,  \
      (REQ(SRC, RD, STASH, 0), REQ(DST, WR, HSTASH, 0)),                                         \
      "copy F(s,b)'s stash from its device slot to a host slot (the device slot dies here)",     \
      "F({s},{b}) stash {src} to host {dst}")                                                    \
    X(Reload, 26, LOCAL, NONE, COMPUTE, PP_U_STAGE | PP_U_MB, NO, NO, NONE, BOOKKEEPING, NONE,   \
      (REQ(SRC, RD, HSTASH, 0), REQ(DST, WR, STASH, 0)),                                         \
      "copy F(s,b)'s offloaded stash from its host slot back to a device slot for B(s,b)",       \
      "F({s},{b}) stash from host {src} into {dst}")
/* clang-format on */

typedef enum {
#define PP_OP_ENUM(name, num, ...) PP_OP_##name = num,
    PP_OPCODES(PP_OP_ENUM)
#undef PP_OP_ENUM
        PP_OP_COUNT /* the last number + 1: the table lists them in order */
} pp_opcode;

/* Numbers are dense, 0 .. PP_OP_COUNT-1, in table order. */
#define PP_OP_ONE(name, ...) +1
_Static_assert(PP_OP_COUNT == 0 PP_OPCODES(PP_OP_ONE),
               "opcode numbers must be 0, 1, 2, ... in order");
#undef PP_OP_ONE

/* When an optional slot must be present (LAST, NOTLAST, NOTFIRST above). */
typedef enum { PP_WHEN_ANY, PP_WHEN_LAST, PP_WHEN_NOT_LAST, PP_WHEN_NOT_FIRST } pp_when;
/* PP_JOB_R: a re-run forward (Recompute), last so that F, B, BI, W stay 1-4. */
typedef enum { PP_JOB_NONE, PP_JOB_F, PP_JOB_B, PP_JOB_BI, PP_JOB_W, PP_JOB_O, PP_JOB_R } pp_op_job;
/* Family names (vm/vmbench.c's table rows), in this order. */
#define PP_FAMILIES(X)                                                                             \
    X(COMPUTE, "compute")                                                                          \
    X(OPTIMIZER, "optimizer") X(TRANSFER, "transfer") X(WEIGHTS, "weights")                        \
        X(COLLECTIVE, "collective") X(BOOKKEEPING, "bookkeeping")
typedef enum {
#define PP_FAMILY_ENUM(F, name) PP_FAMILY_##F,
    PP_FAMILIES(PP_FAMILY_ENUM)
#undef PP_FAMILY_ENUM
        PP_FAMILY_COUNT
} pp_op_family;
/* Message classes; the numbers are the low part of every MPI tag. */
typedef enum {
    PP_TAG_NONE = -1,
    PP_TAG_ACT,
    PP_TAG_GRAD,
    PP_TAG_WEIGHTS,
    PP_TAG_WGRAD,
    PP_TAG_TIED, /* (appended: the tied embedding's gradients) */
    PP_TAG_CLASSES
} pp_op_tag;
typedef enum {
    PP_KIND_MARKER,
    PP_KIND_COMPUTE,
    PP_KIND_LOCAL,
    PP_KIND_SEND,
    PP_KIND_RECV,
    PP_KIND_COLLECTIVE
} pp_op_kind;
typedef enum { PP_LANE_NONE, PP_LANE_COMPUTE, PP_LANE_FLOW, PP_LANE_GROUPABLE } pp_op_lane;
/* Access bits: PP_ACC_UP = read and write. */
typedef enum { PP_ACC_NO = 0, PP_ACC_RD = 1, PP_ACC_WR = 2, PP_ACC_UP = 3 } pp_access;

/* Slot roles: an instruction's slot operands are read by role
 * (pp_slot(in, PP_ROLE_IN)), never by position. */
#define PP_ROLES(X)                                                                                \
    X(TOKENS, tokens)                                                                              \
    X(IN, in) X(STASH, stash) X(OUT, out) X(TGT, tgt) X(WTS, wts) X(DOUT, dout) X(DIN, din)        \
        X(WGRAD, wgrad) X(SRC, src) X(DST, dst) X(TMP, tmp)
typedef enum {
    PP_ROLE_NONE = 0,
#define PP_ROLE_ENUM(R, name) PP_ROLE_##R,
    PP_ROLES(PP_ROLE_ENUM)
#undef PP_ROLE_ENUM
        PP_ROLE_COUNT
} pp_role;

/* What a slot holds, named by the job that produced it. */
#define PP_CONTENTS(X)                                                                             \
    X(TOKENS, "microbatch")                                                                        \
    X(ACT, "output of F") X(GRAD, "input gradient of B") X(STASH, "stash of F")                    \
        X(STASHW, "stash B left for W") X(WTS, "fetched weights") X(WGRAD, "weight gradients")     \
            X(TMP, "received weight gradients") X(TIED, "tied embedding gradients")                \
            X(HSTASH, "stash of F on the host")
typedef enum {
    PP_CONTENT_NONE = 0,
#define PP_CONTENT_ENUM(C, words) PP_CONTENT_##C,
    PP_CONTENTS(PP_CONTENT_ENUM)
#undef PP_CONTENT_ENUM
        PP_CONTENT_COUNT
} pp_content;

#endif
