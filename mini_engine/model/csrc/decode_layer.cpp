// The decoder layers of a plain decode step on a CPU, in one call.
//
// A tiny model's decode step is bound by per-op cost: a layer is some twenty torch
// calls from Python (norms, projections, RoPE's roll/mul/mul/add, two cache writes,
// attention, residuals), each a few microseconds of dispatch around microseconds of
// work. Here every layer is one call. The projection weights come as [in, out]
// matrices (decode_fused.py passes contiguous transposed copies from 16 rows up: MKL's
// sgemm is a fifth faster on them, with F.linear's products; transposed views below);
// the residual adds are at::add as in the Python layer; RoPE and the cache writes are
// loops with the same float operations in the same order (no fused multiply-add, so
// the same roundings); RMSNorm and silu(gate) * up are one loop each, equal to torch's
// up to float rounding (a double sum of squares, a polynomial exp); attention is
// decode_attention.cpp's kernel. Also here: the greedy head (final norm, LM head,
// argmax) and the RMSNorm / SiLU loops on their own for the Python layer.

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/sin.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "fast_exp.h"
#include "ops.h"

namespace {

// Rows split across the intra-op threads (torch.get_num_threads(): the model backend
// chooses it per phase from measurement). A chunk holds at least `kRowWork` elements of
// work, so a small batch stays on one thread (a handoff costs microseconds). Each row
// is computed by one thread with the same operations: results do not depend on the split.
constexpr int64_t kRowWork = 1 << 14;
template <typename F>
inline void for_rows(int64_t rows, int64_t per_row, const F& f) {
  at::parallel_for(0, rows, std::max<int64_t>(1, kRowWork / std::max<int64_t>(per_row, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) f(r);
  });
}

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
  for_rows(B, W, [&](int64_t b) {
    const T* x = src + b * W;  // [q heads | k heads | v heads]
    const T* c = cp + b * D;
    const T* s = sp + b * D;
    rope_row(x, qp + b * H * D, c, s, H, D);
    rope_row(x + H * D, kc + slots[b] * row, c, s, KVH, D);
    std::memcpy(vc + slots[b] * row, x + (H + KVH) * D, row * sizeof(T));
  });
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// RMSNorm of each row: x * (1 / sqrt(mean(x^2) + eps)) * w, the order of torch's ops, the
// sum of squares in double. at::rms_norm is half a dozen ATen calls per row batch
// (pow, mean, add, rsqrt, two muls), tens of microseconds at decode sizes.
template <typename T>
at::Tensor& rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor& out) {
  const at::Tensor xc = x.contiguous();
  const int64_t rows = xc.size(0), n = xc.size(1);
  const T* xp = xc.data_ptr<T>();
  const T* wp = w.data_ptr<T>();
  T* op = out.data_ptr<T>();
  for_rows(rows, n, [&](int64_t r) {
    const T* xr = xp + r * n;
    // Eight partial sums (one vector register of doubles) reduced as a tree.
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int l = 0; l < 8; ++l) part[l] += static_cast<double>(xr[i + l]) * xr[i + l];
    for (; i < n; ++i) part[i & 7] += static_cast<double>(xr[i]) * xr[i];
    const double ss = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    const T inv = T(1) / std::sqrt(static_cast<T>(ss / n) + static_cast<T>(eps));
    T* orow = op + r * n;
    for (int64_t i = 0; i < n; ++i) orow[i] = xr[i] * inv * wp[i];
  });
  return out;
}

// silu(gate) * up over [gate | up] rows, in one pass.
template <typename T>
at::Tensor& silu_mul(const at::Tensor& gate_up, at::Tensor& out) {
  const int64_t rows = gate_up.size(0), n = gate_up.size(1) / 2;
  const T* gp = gate_up.data_ptr<T>();
  T* op = out.data_ptr<T>();
  for_rows(rows, 2 * n, [&](int64_t r) {
    const T* g = gp + r * 2 * n;
    const T* u = g + n;
    T* o = op + r * n;
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        // exp(-g) capped at exp(30): the compiler evaluates the capped case for every
        // lane, and a larger cap makes g / (1 + cap) a denormal for ordinary g, which
        // costs a microcode assist per vector (five times the loop). silu(g) below -30
        // is under 1e-11 either way.
        o[i] = g[i] / (1.0f + kvbench::fast_exp(std::min(-g[i], 30.0f))) * u[i];
      } else {
        o[i] = g[i] / (T(1) + std::exp(-g[i])) * u[i];
      }
    }
  });
  return out;
}

// The layer's intermediates, kept between calls: a fresh 128 KiB tensor per call is a
// fresh mapping (glibc's mmap threshold) and a page fault per page, which cost as much
// as the matmuls at decode sizes. One set per thread; resize_ reallocates only to grow.
at::Tensor& workspace(int slot, at::IntArrayRef sizes, const at::TensorOptions& opts) {
  static thread_local at::Tensor buffers[10];
  at::Tensor& t = buffers[slot];
  if (!t.defined() || t.scalar_type() != opts.dtype().toScalarType()) {
    // A normal tensor, not an inference tensor: a later call outside inference mode
    // (a test's forward, say) may still write into it.
    c10::InferenceMode normal(false);
    t = at::empty(sizes, opts);
  } else {
    t.resize_(sizes);
  }
  return t;
}

template <typename T>
at::Tensor layer(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& w_post, const at::Tensor& w_qkv,
                 const at::Tensor& w_o, const at::Tensor& w_gate_up, const at::Tensor& w_down,
                 const std::optional<at::Tensor>& q_norm, const std::optional<at::Tensor>& k_norm, at::Tensor& k_cache,
                 at::Tensor& v_cache, const at::Tensor& out_slots, const at::Tensor& pages, const at::Tensor& lens,
                 const at::Tensor& cos, const at::Tensor& ssin, int64_t H, int64_t KVH, double eps, int64_t page_size,
                 int64_t window, double scale) {
  const int64_t B = x.size(0), hidden = x.size(1), D = k_cache.size(2), W = w_qkv.size(1);
  const int64_t inter = w_gate_up.size(1) / 2;
  const auto opts = x.options();
  at::Tensor& normed = rms_norm<T>(x, w_in, eps, workspace(0, {B, hidden}, opts));
  at::Tensor qkv = at::mm_out(workspace(1, {B, W}, opts), normed, w_qkv);  // [B, (H + 2 KVH) D]
  if (q_norm.has_value()) {
    // Qwen3: per-head norms before RoPE.
    at::Tensor heads = qkv.view({B, H + 2 * KVH, D});
    at::Tensor qn = rms_norm<T>(heads.narrow(1, 0, H).reshape({B * H, D}), *q_norm, eps,
                                workspace(2, {B * H, D}, opts)).view({B, H, D});
    at::Tensor kn = rms_norm<T>(heads.narrow(1, H, KVH).reshape({B * KVH, D}), *k_norm, eps,
                                workspace(3, {B * KVH, D}, opts)).view({B, KVH, D});
    qkv = at::cat({qn, kn, heads.narrow(1, H + KVH, KVH)}, 1).view({B, -1});
  }
  at::Tensor& q = workspace(4, {B, H, D}, opts);
  rope_and_write<T>(qkv, q, k_cache, v_cache, out_slots, cos, ssin, H, KVH, D);
  at::Tensor& o = workspace(5, {B, H, D}, opts);
  kvbench::decode_attention_into(q, k_cache, v_cache, pages, lens, page_size, window, scale, o);
  at::Tensor& proj = at::mm_out(workspace(6, {B, hidden}, opts), o.view({B, H * D}), w_o);
  at::Tensor& h = at::add_out(workspace(7, {B, hidden}, opts), x, proj);
  at::Tensor& gate_up = at::mm_out(workspace(8, {B, 2 * inter}, opts), rms_norm<T>(h, w_post, eps, normed),
                                   w_gate_up);
  at::Tensor& act = silu_mul<T>(gate_up, workspace(9, {B, inter}, opts));
  at::Tensor& down = at::mm_out(proj, act, w_down);
  return at::add(h, down);  // a new tensor: the caller keeps it, the workspace is reused
}

at::Tensor decode_layer(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& w_post, const at::Tensor& w_qkv,
                        const at::Tensor& w_o, const at::Tensor& w_gate_up, const at::Tensor& w_down,
                        const std::optional<at::Tensor>& q_norm, const std::optional<at::Tensor>& k_norm,
                        at::Tensor k_cache, at::Tensor v_cache, const at::Tensor& out_slots, const at::Tensor& pages,
                        const at::Tensor& lens, const at::Tensor& cos, const at::Tensor& ssin, int64_t heads,
                        int64_t kv_heads, double eps, int64_t page_size, int64_t window, double scale) {
  const int64_t B = x.size(0), D = k_cache.size(2);
  TORCH_CHECK(x.dim() == 2 && k_cache.is_contiguous() && v_cache.is_contiguous(), "x [B, hidden], contiguous caches");
  TORCH_CHECK(cos.is_contiguous() && ssin.is_contiguous() && cos.numel() == B * D, "rope tables [B, 1, D]");
  TORCH_CHECK(out_slots.scalar_type() == at::kLong && out_slots.numel() == B, "one int64 slot per row");
  TORCH_CHECK(w_in.is_contiguous() && w_post.is_contiguous(), "contiguous norm weights");
  if (x.scalar_type() == at::kFloat) {
    return layer<float>(x, w_in, w_post, w_qkv, w_o, w_gate_up, w_down, q_norm, k_norm, k_cache, v_cache, out_slots,
                        pages, lens, cos, ssin, heads, kv_heads, eps, page_size, window, scale);
  }
  TORCH_CHECK(x.scalar_type() == at::kDouble, "decode_layer takes float32 or float64");
  return layer<double>(x, w_in, w_post, w_qkv, w_o, w_gate_up, w_down, q_norm, k_norm, k_cache, v_cache, out_slots,
                       pages, lens, cos, ssin, heads, kv_heads, eps, page_size, window, scale);
}

// Rows of a forward split into one chunk per intra-op thread, each chunk running every
// layer on its own: a decode row reads only its own sequence's keys, so chunks never
// wait on each other, where splitting each product and loop separately hands work over
// a dozen times per layer (MKL gains 1.4x at 2 threads on 64-row products, the whole
// forward 1.8x this way). A cut never separates rows of one sequence (`row_seq`, when
// given: the rows of a verify chain or a DFLASH block read each other's keys, written in
// the same layer), and every chunk holds at least kMinSplitRows rows: MKL's products of
// 4 rows or more round exactly as the whole batch's (measured at every shape of the
// bench and Qwen3 models), so results do not depend on the split. `row_seq` must be
// non-decreasing.
constexpr int64_t kMinSplitRows = 16;

std::vector<int64_t> row_cuts(int64_t B, const std::optional<at::Tensor>& row_seq) {
  std::vector<int64_t> cuts{0};
  const int64_t threads = at::get_num_threads();
  if (threads > 1 && !at::in_parallel_region() && B >= 2 * kMinSplitRows) {
    const int64_t chunks = std::min(threads, B / kMinSplitRows);
    const int64_t* seq = row_seq.has_value() ? row_seq->data_ptr<int64_t>() : nullptr;
    for (int64_t c = 1; c < chunks; ++c) {
      int64_t r = std::max(c * B / chunks, cuts.back() + kMinSplitRows);
      while (seq != nullptr && r < B && seq[r] == seq[r - 1]) ++r;
      if (B - r < kMinSplitRows) break;
      cuts.push_back(r);
    }
  }
  cuts.push_back(B);
  return cuts;
}

}  // namespace

namespace kvbench {

// Every layer of a decode forward in one call: `weights` holds each layer's w_in, w_post,
// w_qkv, w_o, w_gate_up, w_down (then q_norm, k_norm with qk_norm), `sliding[i]` picks
// the SWA pool's slots and page table for layer i, `windows[i]` its window.
at::Tensor decode_layers(const at::Tensor& x, at::TensorList weights, at::TensorList k_caches, at::TensorList v_caches,
                         const at::Tensor& out_slots, const at::Tensor& pages, const std::optional<at::Tensor>& swa_out,
                         const std::optional<at::Tensor>& swa_pages, at::IntArrayRef sliding, at::IntArrayRef windows,
                         const at::Tensor& lens, const at::Tensor& positions, const at::Tensor& inv_freq,
                         int64_t heads, int64_t kv_heads, bool qk_norm, double eps, int64_t page_size, double scale,
                         const std::optional<at::Tensor>& row_seq) {
  const int64_t L = static_cast<int64_t>(k_caches.size()), per = qk_norm ? 8 : 6;
  TORCH_CHECK(static_cast<int64_t>(weights.size()) == L * per && static_cast<int64_t>(v_caches.size()) == L &&
                  static_cast<int64_t>(sliding.size()) == L && static_cast<int64_t>(windows.size()) == L,
              "one set of weights, caches, a sliding flag and a window per layer");
  TORCH_CHECK(!row_seq.has_value() || (row_seq->scalar_type() == at::kLong && row_seq->is_contiguous() &&
                                       row_seq->numel() == x.size(0)),
              "row_seq: one int64 sequence index per row");
  // RoPE tables once for every layer, with layers.rope_cos_sin / rope_tables' ATen ops
  // (the same values): cos of [f, f] and the signed sin [-sin f, sin f], f = pos * inv_freq.
  const at::Tensor freqs = at::mul(positions.to(inv_freq.scalar_type()).unsqueeze(1), inv_freq.unsqueeze(0));
  const at::Tensor c = at::cos(freqs), sn = at::sin(freqs);
  const at::Tensor cos = at::cat({c, c}, 1), ssin = at::cat({at::neg(sn), sn}, 1);
  const auto rows = [&](int64_t lo, int64_t n) {
    const auto part = [&](const at::Tensor& t) { return t.narrow(0, lo, n); };
    std::optional<at::Tensor> s_out, s_pages;
    if (swa_out.has_value()) s_out = part(*swa_out);
    if (swa_pages.has_value()) s_pages = part(*swa_pages);
    const at::Tensor r_slots = part(out_slots), r_pages = part(pages), r_lens = part(lens);
    const at::Tensor r_cos = part(cos), r_ssin = part(ssin);
    at::Tensor h = part(x);
    for (int64_t i = 0; i < L; ++i) {
      const at::Tensor* w = weights.data() + i * per;
      std::optional<at::Tensor> qn, kn;
      if (qk_norm) {
        qn = w[6];
        kn = w[7];
      }
      const bool swa = sliding[i] != 0;
      TORCH_CHECK(!swa || (s_out.has_value() && s_pages.has_value()), "a sliding layer needs the SWA slots");
      h = decode_layer(h, w[0], w[1], w[2], w[3], w[4], w[5], qn, kn, k_caches[i], v_caches[i],
                       swa ? *s_out : r_slots, swa ? *s_pages : r_pages, r_lens, r_cos, r_ssin, heads, kv_heads,
                       eps, page_size, windows[i], scale);
    }
    return h;
  };
  const std::vector<int64_t> cuts = row_cuts(x.size(0), row_seq);
  const int64_t chunks = static_cast<int64_t>(cuts.size()) - 1;
  if (chunks == 1) return rows(0, x.size(0));
  at::Tensor out = at::empty_like(x);
  // The caller's thread-local state (inference mode, the dispatch keys) holds on every
  // thread: ATen's parallel_for does not carry it over to OpenMP's workers.
  const at::ThreadLocalState state;
  at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    const at::ThreadLocalStateGuard guard(state);
    for (int64_t k = lo; k < hi; ++k) out.narrow(0, cuts[k], cuts[k + 1] - cuts[k]).copy_(rows(cuts[k], cuts[k + 1] - cuts[k]));
  });
  return out;
}

// Greedy tokens of the last hidden states: the final RMSNorm, the LM head ([hidden, vocab],
// a copy or a view) and the first index of each row's maximum, as torch.argmax.
at::Tensor greedy_head(const at::Tensor& h, const at::Tensor& norm_w, const at::Tensor& head, double eps) {
  TORCH_CHECK(h.dim() == 2 && h.scalar_type() == head.scalar_type() && norm_w.is_contiguous(), "h [B, hidden]");
  TORCH_CHECK(h.scalar_type() == at::kFloat || h.scalar_type() == at::kDouble, "greedy_head takes float32 or float64");
  const at::Tensor hc = h.contiguous();
  at::Tensor out = at::empty({hc.size(0)}, h.options().dtype(at::kLong));
  // The rows split as decode_layers splits them (row_cuts): each row is one thread's.
  const auto rows = [&](int64_t lo, int64_t n) {
    const at::Tensor part = hc.narrow(0, lo, n);
    at::Tensor normed = at::empty_like(part);
    if (h.scalar_type() == at::kFloat) {
      rms_norm<float>(part, norm_w, eps, normed);
    } else {
      rms_norm<double>(part, norm_w, eps, normed);
    }
    const at::Tensor logits = at::mm(normed, head);
    // The first index of each row's maximum, as torch.argmax; torch's reduction kernel
    // costs several times this loop at decode sizes.
    const int64_t vocab = logits.size(1);
    int64_t* op = out.data_ptr<int64_t>() + lo;
    AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "greedy_head", [&] {
      const scalar_t* lp = logits.data_ptr<scalar_t>();
      for_rows(n, vocab, [&](int64_t r) {
        const scalar_t* row = lp + r * vocab;
        int64_t best = 0;
        for (int64_t i = 1; i < vocab; ++i) {
          if (row[i] > row[best] || (std::isnan(row[i]) && !std::isnan(row[best]))) best = i;
        }
        op[r] = best;
      });
    });
  };
  const std::vector<int64_t> cuts = row_cuts(hc.size(0), std::nullopt);
  const at::ThreadLocalState state;  // as in decode_layers
  at::parallel_for(0, static_cast<int64_t>(cuts.size()) - 1, 1, [&](int64_t lo, int64_t hi) {
    const at::ThreadLocalStateGuard guard(state);
    for (int64_t k = lo; k < hi; ++k) rows(cuts[k], cuts[k + 1] - cuts[k]);
  });
  return out;
}

// The two loops on their own, for the Python layer's prefill and verify forwards.
at::Tensor rms_norm_op(const at::Tensor& x, const at::Tensor& w, double eps) {
  TORCH_CHECK(w.dim() == 1 && x.size(-1) == w.size(0) && w.is_contiguous() && x.scalar_type() == w.scalar_type(),
              "rms_norm: x [..., n], weight [n] of x's dtype");
  const at::Tensor rows = x.reshape({-1, x.size(-1)});
  at::Tensor out = at::empty(rows.sizes(), rows.options());
  if (x.scalar_type() == at::kFloat) {
    rms_norm<float>(rows, w, eps, out);
  } else {
    TORCH_CHECK(x.scalar_type() == at::kDouble, "rms_norm takes float32 or float64");
    rms_norm<double>(rows, w, eps, out);
  }
  return out.view(x.sizes());
}

at::Tensor silu_mul_op(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "silu_mul: [rows, 2 x inter]");
  const at::Tensor g = gate_up.contiguous();
  at::Tensor out = at::empty({g.size(0), g.size(1) / 2}, g.options());
  if (g.scalar_type() == at::kFloat) {
    silu_mul<float>(g, out);
  } else {
    TORCH_CHECK(g.scalar_type() == at::kDouble, "silu_mul takes float32 or float64");
    silu_mul<double>(g, out);
  }
  return out;
}

}  // namespace kvbench
