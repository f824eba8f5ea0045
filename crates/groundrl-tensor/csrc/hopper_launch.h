// The launchers of the Hopper kernels (gate_up_swiglu.cu, prompt_attention.cu, split_product.cu; built
// for sm_90a in libraries of their own) as their callers (fused.cpp, decode_attention.cu) see them, and
// their answer where the kernel does not apply: kHopperUnsupported, nothing launched, the caller takes
// its other path. Plain C++, so that the C++ shims include it too.

#pragma once

#include <cstdint>

constexpr int kHopperUnsupported = -1;

extern "C" {

// See gate_up_swiglu.cu.
int groundrl_launch_gate_up_swiglu(const void* x, int64_t x_row, const void* weight, void* out,
                                   int64_t rows, int64_t hidden, int64_t inter, void* stream);

// See split_product.cu.
int groundrl_launch_split_product(const void* x, int64_t x_row, const void* weight, float* parts,
                                  int64_t rows, int64_t k, int64_t n, int64_t splits, void* stream);

// See prompt_attention.cu.
int groundrl_launch_prompt_attention(const void* q, const void* keys, const void* values,
                                     const void* mask, const int64_t* leader, const int64_t* chunks,
                                     const int64_t* prompt_columns, const int64_t* column,
                                     float* part_o, float* part_ml, int64_t rows, int64_t kv_heads,
                                     int64_t capacity, int64_t splits, float scale_log2,
                                     void* stream);
}
