/* tensor_hook.c - the all-reduce hook the mlp and gpt blocks call inside F and B
 * under tensor parallelism (tensor_shard.h): apart from the shards, which
 * use the stage functions, so that the blocks depend on nothing above
 * them. */
#include "tensor_shard.h"

static pp_tensor_allreduce_fn hook_fn;
static void *hook_ctx;

void pp_tensor_hook_set(pp_tensor_allreduce_fn fn, void *ctx)
{
    hook_fn = fn;
    hook_ctx = fn ? ctx : NULL;
}

int pp_tensor_hook_active(void) { return hook_fn != NULL; }

void pp_tensor_allreduce(float *buf, size_t n)
{
    if (hook_fn)
        hook_fn(hook_ctx, buf, n);
}
