// The kernels' schemas: torch.ops.kvbench_cpu.* (no Python binding module: the
// dispatcher's schema is the interface). The only file that includes torch/library.h
// (see ops.h for why).

#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(kvbench_cpu, m) {
  m.def("decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor pages, Tensor lens, int page_size, "
        "int window, float scale) -> Tensor");
  m.impl("decode_attention", c10::DispatchKey::CPU, &kvbench::decode_attention);
  m.def("extend_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor kv_slots, Tensor q_indptr, "
        "Tensor kv_indptr, Tensor q_pos, Tensor? custom_mask, Tensor? mask_indptr, int window, float scale) -> Tensor");
  m.impl("extend_attention", c10::DispatchKey::CPU, &kvbench::extend_attention);
  m.def("decode_layers(Tensor x, Tensor[] weights, Tensor(a!)[] k_caches, Tensor(b!)[] v_caches, Tensor out_slots, "
        "Tensor pages, Tensor? swa_out, Tensor? swa_pages, int[] sliding, int[] windows, Tensor lens, "
        "Tensor positions, Tensor inv_freq, int heads, int kv_heads, bool qk_norm, float eps, int page_size, "
        "float scale, Tensor? row_seq=None) -> Tensor");
  m.impl("decode_layers", c10::DispatchKey::CPU, &kvbench::decode_layers);
  m.def("greedy_head(Tensor h, Tensor norm_w, Tensor head, float eps) -> Tensor");
  m.impl("greedy_head", c10::DispatchKey::CPU, &kvbench::greedy_head);
  m.def("rms_norm(Tensor x, Tensor w, float eps) -> Tensor");
  m.impl("rms_norm", c10::DispatchKey::CPU, &kvbench::rms_norm_op);
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.impl("silu_mul", c10::DispatchKey::CPU, &kvbench::silu_mul_op);
}
