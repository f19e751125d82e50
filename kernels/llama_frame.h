/* llama_frame.h - the llama kind's layouts gathered in one struct
 * (llama_layouts, llama_layouts_of) and the stage frame they give the
 * skeleton (llama_frame_of): stage_frame.h's transformer definition, which
 * gpt's share. Header-only. */
#ifndef PP_LLAMA_FRAME_H
#define PP_LLAMA_FRAME_H

#include "../isa/llama_layout.h"
#include "stage_frame.h"

PP_TRANSFORMER_FRAME(llama)

#endif
