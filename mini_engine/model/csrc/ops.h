// The kernels' entry points, as the registration (register.cpp) binds them to their
// schemas. Each kernel file includes only ATen's tensor and parallel headers (and the few
// operators it calls): ATen/ATen.h declares every operator and torch/library.h the whole
// dispatcher, a quarter of a minute of parsing per file on a two-core machine, so only
// register.cpp pays for the dispatcher, once.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace kvbench {

// decode_attention.cpp
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& pages, const at::Tensor& lens, int64_t page_size, int64_t window,
                            double scale);
void decode_attention_into(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& pages, const at::Tensor& lens, int64_t page_size, int64_t window,
                           double scale, at::Tensor& out);

// extend_attention.cpp
at::Tensor extend_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& kv_slots, const at::Tensor& q_indptr, const at::Tensor& kv_indptr,
                            const at::Tensor& q_pos, const std::optional<at::Tensor>& custom_mask,
                            const std::optional<at::Tensor>& mask_indptr, int64_t window, double scale);

// decode_layer.cpp
at::Tensor decode_layers(const at::Tensor& x, at::TensorList weights, at::TensorList k_caches, at::TensorList v_caches,
                         const at::Tensor& out_slots, const at::Tensor& pages, const std::optional<at::Tensor>& swa_out,
                         const std::optional<at::Tensor>& swa_pages, at::IntArrayRef sliding, at::IntArrayRef windows,
                         const at::Tensor& lens, const at::Tensor& positions, const at::Tensor& inv_freq,
                         int64_t heads, int64_t kv_heads, bool qk_norm, double eps, int64_t page_size, double scale,
                         const std::optional<at::Tensor>& row_seq);
at::Tensor greedy_head(const at::Tensor& h, const at::Tensor& norm_w, const at::Tensor& head, double eps);
at::Tensor rms_norm_op(const at::Tensor& x, const at::Tensor& w, double eps);
at::Tensor silu_mul_op(const at::Tensor& gate_up);

}  // namespace kvbench
