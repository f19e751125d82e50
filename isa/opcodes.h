/* opcodes.h - the one table of pp's instructions.
 *
 * Every other artifact (the enum, the names, the operand checks of the
 * decoder, the disassembler's columns and comments) is generated from this
 * list, so adding an instruction is one line here plus its case in the VM.
 *
 * PP_OP(Name, uses, slots, synopsis)
 *   uses     which scalar operands the instruction reads: PP_U_STAGE,
 *            PP_U_MB (microbatch), PP_U_PEER (another rank), PP_U_GROUP
 *            (an entry of the plan's group table); unused ones are -1.
 *   slots    the roles of its buffer-slot operands, comma separated, at most
 *            PP_MAX_SLOTS; a role ending in '?' may be -1 (absent).
 *   synopsis one line for the listing's header and the README.
 *
 * Stage/microbatch of a transfer name the job that PRODUCED the data:
 * SendActivation s b carries the output of F(s,b) to the rank running
 * F(s+1,b); SendGrad s b carries B(s,b)'s input gradient to the rank running
 * B(s-1,b).
 *
 * Weights: a job computing away from its stage's owner reads the weights
 * from its `wts` slot (filled by FetchWeights) and accumulates weight
 * gradients into its `wgrad` slot, which SendWeightGrad returns to the owner
 * at the end of the step; with the slot absent (-1) the job uses the rank's
 * own copy of the stage.
 *
 * GroupStart/GroupEnd bracket point-to-point transfers that the rank posts
 * one after another in the same direction (pp_group_direction): the cuda
 * backend gives each direction its own stream and NCCL communicator, and
 * posts a bracket as one ncclGroupStart/End, so its transfers progress
 * together instead of each waiting for the one before. */
#ifndef PP_OPCODES_H
#define PP_OPCODES_H

#define PP_U_STAGE 1u
#define PP_U_MB 2u
#define PP_U_PEER 4u
#define PP_U_GROUP 8u

#define PP_OPCODES(X)                                                                              \
    X(LoadMicroBatch, PP_U_MB, "tokens", "read microbatch b's windows and targets into a slot")   \
    X(Forward, PP_U_STAGE | PP_U_MB, "in,stash,out?,tgt?,wts?",                                    \
      "run F(s,b): read in, save what B needs in stash, write out (loss on the last stage)")       \
    X(SendActivation, PP_U_STAGE | PP_U_MB | PP_U_PEER, "src",                                     \
      "send F(s,b)'s output to the rank that runs F(s+1,b)")                                       \
    X(RecvActivation, PP_U_STAGE | PP_U_MB | PP_U_PEER, "dst",                                     \
      "receive F(s,b)'s output from the rank that ran it")                                         \
    X(Backward, PP_U_STAGE | PP_U_MB, "stash,dout?,din?,wts?,wgrad?",                              \
      "run B(s,b): accumulate weight gradients, write the input gradient to din")                  \
    X(BackwardInput, PP_U_STAGE | PP_U_MB, "stash,dout?,din?,wts?",                                \
      "split backward, B(s,b): write the input gradient to din, keep in stash what W needs")      \
    X(BackwardWeight, PP_U_STAGE | PP_U_MB, "stash,wgrad?",                                        \
      "split backward, W(s,b): accumulate stage s's weight gradients from the stash")             \
    X(SendGrad, PP_U_STAGE | PP_U_MB | PP_U_PEER, "src",                                           \
      "send B(s,b)'s input gradient to the rank that runs B(s-1,b)")                               \
    X(RecvGrad, PP_U_STAGE | PP_U_MB | PP_U_PEER, "dst",                                           \
      "receive B(s,b)'s input gradient from the rank that ran it")                                 \
    X(FetchWeights, PP_U_STAGE | PP_U_PEER, "wts",                                                 \
      "receive stage s's weights from their owner, for jobs that compute away from it")           \
    X(SendWeights, PP_U_STAGE | PP_U_PEER, "",                                                     \
      "send stage s's weights (this rank owns them) to a rank that fetches them")                 \
    X(ZeroGrads, PP_U_STAGE, "wgrad",                                                             \
      "clear a slot that will accumulate stage s's weight gradients on this non-owner rank")      \
    X(SendWeightGrad, PP_U_STAGE | PP_U_PEER, "wgrad",                                             \
      "send the stage s weight gradients accumulated here to the stage's owner")                  \
    X(RecvWeightGrad, PP_U_STAGE | PP_U_PEER, "tmp",                                               \
      "receive stage s weight gradients from a rank that computed with them; add them to ours")   \
    X(ReduceGrads, PP_U_STAGE | PP_U_GROUP, "",                                                    \
      "all-reduce stage s's weight gradients among the replicas in group g")                      \
    X(OptimizerStep, PP_U_STAGE, "", "apply the optimizer to stage s's weights and clear its gradients") \
    X(GroupStart, 0u, "", "post the transfers up to GroupEnd together (one NCCL group)")            \
    X(GroupEnd, 0u, "", "end of a group of transfers")

typedef enum {
#define PP_OP_ENUM(name, uses, slots, syn) PP_OP_##name,
    PP_OPCODES(PP_OP_ENUM)
#undef PP_OP_ENUM
        PP_OP_COUNT
} pp_opcode;

#endif
