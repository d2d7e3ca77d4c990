// One decoder layer of a plain decode step on a CPU, in one call.
//
// A tiny model's decode step is bound by per-op cost: a layer is some twenty torch
// calls from Python (norms, projections, RoPE's roll/mul/mul/add, two cache writes,
// attention, residuals), each a few microseconds of dispatch around microseconds of
// work. Here the same layer is one call. The norms, projections, SiLU and residual
// adds are the very ATen ops the Python layer calls (at::rms_norm, at::linear, ...),
// so their results are bitwise those of the torch path; RoPE and the cache writes
// are loops with the same float operations in the same order (built with
// -ffp-contract=off: no fused multiply-add changes a rounding); attention is
// decode_attention.cpp's kernel.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstring>
#include <optional>

namespace kvbench {
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& pages, const at::Tensor& lens, int64_t page_size, int64_t window,
                            double scale);
}

namespace {

#if defined(__GNUC__) && !defined(__clang__)
// GCC contracts a * b + c across statements by default; RoPE must round as torch does.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

// x * cos + swapped(x) * signed_sin for `heads` heads of one row, as apply_rope_signed:
// swapped is x with its halves exchanged (the roll), signed_sin has its first half negated.
template <typename T>
inline void rope_row(const T* x, T* out, const T* cos, const T* ssin, int64_t heads, int64_t D) {
  const int64_t half = D / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const T* xh = x + h * D;
    T* oh = out + h * D;
    for (int64_t d = 0; d < D; ++d) {
      const T swapped = xh[d < half ? d + half : d - half];
      const T a = xh[d] * cos[d];
      const T b = swapped * ssin[d];
      oh[d] = a + b;
    }
  }
}

template <typename T>
void rope_and_write(const at::Tensor& qkv, at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache,
                    const at::Tensor& out_slots, const at::Tensor& cos, const at::Tensor& ssin, int64_t H,
                    int64_t KVH, int64_t D) {
  const int64_t B = qkv.size(0), W = qkv.size(1);
  const T* src = qkv.data_ptr<T>();
  T* qp = q.data_ptr<T>();
  T* kc = k_cache.data_ptr<T>();
  T* vc = v_cache.data_ptr<T>();
  const int64_t* slots = out_slots.data_ptr<int64_t>();
  const T* cp = cos.data_ptr<T>();
  const T* sp = ssin.data_ptr<T>();
  const int64_t row = KVH * D;
  for (int64_t b = 0; b < B; ++b) {
    const T* x = src + b * W;  // [q heads | k heads | v heads]
    const T* c = cp + b * D;
    const T* s = sp + b * D;
    rope_row(x, qp + b * H * D, c, s, H, D);
    rope_row(x + H * D, kc + slots[b] * row, c, s, KVH, D);
    std::memcpy(vc + slots[b] * row, x + (H + KVH) * D, row * sizeof(T));
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

at::Tensor decode_layer(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& w_post, const at::Tensor& w_qkv,
                        const at::Tensor& w_o, const at::Tensor& w_gate_up, const at::Tensor& w_down,
                        const std::optional<at::Tensor>& q_norm, const std::optional<at::Tensor>& k_norm,
                        at::Tensor k_cache, at::Tensor v_cache, const at::Tensor& out_slots, const at::Tensor& pages,
                        const at::Tensor& lens, const at::Tensor& cos, const at::Tensor& ssin, int64_t heads,
                        int64_t kv_heads, double eps, int64_t page_size, int64_t window, double scale) {
  const int64_t B = x.size(0), hidden = x.size(1), D = k_cache.size(2), H = heads, KVH = kv_heads;
  TORCH_CHECK(x.dim() == 2 && k_cache.is_contiguous() && v_cache.is_contiguous(), "x [B, hidden], contiguous caches");
  TORCH_CHECK(cos.is_contiguous() && ssin.is_contiguous() && cos.numel() == B * D, "rope tables [B, 1, D]");
  TORCH_CHECK(out_slots.scalar_type() == at::kLong && out_slots.numel() == B, "one int64 slot per row");
  at::Tensor qkv = at::linear(at::rms_norm(x, {hidden}, w_in, eps), w_qkv);  // [B, (H + 2 KVH) D]
  if (q_norm.has_value()) {
    // Qwen3: per-head norms before RoPE, the torch path's ops on the same views.
    at::Tensor v = qkv.view({B, H + 2 * KVH, D});
    at::Tensor qn = at::rms_norm(v.narrow(1, 0, H), {D}, *q_norm, eps);
    at::Tensor kn = at::rms_norm(v.narrow(1, H, KVH), {D}, *k_norm, eps);
    qkv = at::cat({qn, kn, v.narrow(1, H + KVH, KVH)}, 1).view({B, -1});
  }
  qkv = qkv.contiguous();
  at::Tensor q = at::empty({B, H, D}, x.options());
  if (x.scalar_type() == at::kFloat) {
    rope_and_write<float>(qkv, q, k_cache, v_cache, out_slots, cos, ssin, H, KVH, D);
  } else {
    TORCH_CHECK(x.scalar_type() == at::kDouble, "decode_layer takes float32 or float64");
    rope_and_write<double>(qkv, q, k_cache, v_cache, out_slots, cos, ssin, H, KVH, D);
  }
  at::Tensor o = kvbench::decode_attention(q, k_cache, v_cache, pages, lens, page_size, window, scale);
  at::Tensor h = at::add(x, at::linear(o.view({B, H * D}), w_o));
  at::Tensor gate_up = at::linear(at::rms_norm(h, {hidden}, w_post, eps), w_gate_up);
  const int64_t inter = gate_up.size(1) / 2;
  at::Tensor act = at::mul(at::silu(gate_up.narrow(1, 0, inter)), gate_up.narrow(1, inter, inter));
  return at::add(h, at::linear(act, w_down));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvbench_cpu, m) {
  m.def("decode_layer(Tensor x, Tensor w_in, Tensor w_post, Tensor w_qkv, Tensor w_o, Tensor w_gate_up, "
        "Tensor w_down, Tensor? q_norm, Tensor? k_norm, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor out_slots, "
        "Tensor pages, Tensor lens, Tensor cos, Tensor ssin, int heads, int kv_heads, float eps, int page_size, "
        "int window, float scale) -> Tensor");
  m.impl("decode_layer", c10::DispatchKey::CPU, &decode_layer);
}
