// Paged attention of a few queries per sequence on a CPU: speculative verify (a DFLASH
// block, an EAGLE chain or tree), the drafters' forwards and short extends.
//
// The pure-torch general path pads the batch to [B, max_q] x [B, max_kv], gathers every
// key and value through the slot rows into that padded copy, builds an additive mask
// and calls SDPA: per layer two gathers of the whole context and a masked kernel, most
// of a small model's verify step. Here each (sequence, KV head) copies only its own
// keys, once, through its slot row (build_meta's flat kv_slots), reads its values in
// place, and each query weighs only the keys it sees, by the rules of attn_meta.py: a prefix key when its position is not
// later than the query's, an extend key by the custom mask when there is one (tree
// ancestors, a non-causal block) else causally by position, and on a sliding layer
// only inside the window. Then an exact softmax over the seen keys (max, exp, sum) and
// the weighted values, as the decode kernel.
//
// Registered as torch.ops.kvbench_cpu.extend_attention (register.cpp).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "attend_math.h"
#include "ops.h"

namespace {

// o = inv * sum_t p[t] v(row[t]) over n keys. With the head dim known (DC > 0) the even
// and odd keys go to two register accumulators: two independent multiply-add chains.
template <typename T, int DC>
inline void weigh_values(const T* p, const int64_t* row, const T* vh, int64_t stride, int64_t n, int64_t D, T inv,
                         T* o, T* heap) {
  if constexpr (DC > 0) {
    T a0[DC] = {}, a1[DC] = {};
    int64_t t = 0;
    for (; t + 2 <= n; t += 2) {
      const T p0 = p[t], p1 = p[t + 1];
      const T* v0 = vh + row[t] * stride;
      const T* v1 = vh + row[t + 1] * stride;
      for (int d = 0; d < DC; ++d) a0[d] += p0 * v0[d];
      for (int d = 0; d < DC; ++d) a1[d] += p1 * v1[d];
    }
    if (t < n) {
      const T p0 = p[t];
      const T* v0 = vh + row[t] * stride;
      for (int d = 0; d < DC; ++d) a0[d] += p0 * v0[d];
    }
    for (int d = 0; d < DC; ++d) o[d] = (a0[d] + a1[d]) * inv;
  } else {
    std::fill(heap, heap + D, T(0));
    for (int64_t t = 0; t < n; ++t) {
      const T p0 = p[t];
      const T* v0 = vh + row[t] * stride;
      for (int64_t d = 0; d < D; ++d) heap[d] += p0 * v0[d];
    }
    for (int64_t d = 0; d < D; ++d) o[d] = heap[d] * inv;
  }
}

// DC is the head dim when known at compile time (the accumulator then lives in
// registers and the per-key loops unroll), 0 for any other.
template <typename T, int DC>
void attend(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& kv_slots,
            const at::Tensor& q_indptr, const at::Tensor& kv_indptr, const at::Tensor& q_pos, const int8_t* mask,
            const int64_t* mask_indptr, int64_t window, double scale, at::Tensor& out) {
  const int64_t B = q_indptr.size(0) - 1, H = q.size(1), D = DC > 0 ? DC : q.size(2);
  const int64_t KVH = k_cache.size(1), G = H / KVH;
  const T* qp = q.data_ptr<T>();
  const T* kp = k_cache.data_ptr<T>();
  const T* vp = v_cache.data_ptr<T>();
  const int64_t* slots = kv_slots.data_ptr<int64_t>();
  const int64_t* qi = q_indptr.data_ptr<int64_t>();
  const int64_t* ki = kv_indptr.data_ptr<int64_t>();
  const int64_t* pos = q_pos.data_ptr<int64_t>();
  T* op = out.data_ptr<T>();
  const int64_t slot_stride = KVH * D;  // caches are [slots, KVH, D], contiguous
  const T sc = static_cast<T>(scale);
  at::parallel_for(0, B * KVH, 1, [&](int64_t begin, int64_t end) {
    // Per (sequence, KV head): its keys gathered once as [D, n] (every query row of the
    // sequence then runs along the keys: vector products without a horizontal sum per
    // key), one score row, the visibility of each key to the current query, the output row.
    std::vector<T> kt, scores, acc_heap(DC > 0 ? 0 : D);
    std::vector<uint8_t> vis;
    for (int64_t w = begin; w < end; ++w) {
      const int64_t b = w / KVH, h = w % KVH;
      const int64_t q0 = qi[b], nq = qi[b + 1] - q0, k0 = ki[b], nk = ki[b + 1] - k0;
      const int64_t prefix = nk - nq;
      // Prefix keys below every query's window are never seen: start past them.
      int64_t klo = 0;
      if (window > 0) {
        int64_t lowest = pos[q0];
        for (int64_t i = 1; i < nq; ++i) lowest = std::min(lowest, pos[q0 + i]);
        klo = std::min(prefix, std::max<int64_t>(0, lowest - window + 1));
      }
      const int64_t n = nk - klo;
      const int64_t* row = slots + k0 + klo;
      // Keys padded to whole runs of 16 (zero keys, never seen): the score loop below
      // keeps a run's 16 sums in registers across the head dim.
      const int64_t np = (n + 15) / 16 * 16;
      kt.assign(D * np, T(0));
      scores.resize(np);
      vis.resize(np);
      for (int64_t t = 0; t < n; ++t) {
        const T* kr = kp + row[t] * slot_stride + h * D;
        for (int64_t d = 0; d < D; ++d) kt[d * np + t] = kr[d];
      }
      const T* vh = vp + h * D;
      for (int64_t i = 0; i < nq; ++i) {
        // Which keys query i sees (attn_meta.py): a prefix key sits at its row index and
        // is seen when not later than the query; an extend key sits at its query's
        // position and is seen by the custom mask when there is one, else causally.
        const int64_t qpos = pos[q0 + i];
        const int8_t* m = mask != nullptr ? mask + mask_indptr[b] + i * nq : nullptr;
        // The seen prefix keys are one range [lo, hi), at or above klo.
        const int64_t lo = window > 0 ? std::max<int64_t>(0, qpos - window + 1) : 0;
        const int64_t hi = std::min(prefix, qpos + 1);
        std::fill(vis.begin(), vis.end(), uint8_t(0));
        int64_t seen = 0;
        if (hi > lo) {
          std::fill(vis.begin() + (lo - klo), vis.begin() + (hi - klo), uint8_t(1));
          seen = hi - lo;
        }
        for (int64_t e = 0; e < nq; ++e) {
          const int64_t kpos = pos[q0 + e];
          bool ok = m != nullptr ? m[e] != 0 : kpos <= qpos;
          if (window > 0) ok = ok && qpos - kpos < window;
          vis[prefix - klo + e] = ok;
          seen += ok;
        }
        for (int64_t g = 0; g < G; ++g) {
          const T* qg = qp + ((q0 + i) * H + h * G + g) * D;
          T* o = op + ((q0 + i) * H + h * G + g) * D;
          if (seen == 0) {
            std::fill(o, o + D, T(0));
            continue;
          }
          T* __restrict s = scores.data();
          const T* __restrict k_t = kt.data();
          const T minus_inf = -std::numeric_limits<T>::infinity();
          T mxl[16];
          for (int l = 0; l < 16; ++l) mxl[l] = minus_inf;
          for (int64_t t0 = 0; t0 < np; t0 += 16) {
            // Four partial sums over the head dim: four independent chains of
            // multiply-adds (one chain waits on each add's latency).
            T r0[16] = {}, r1[16] = {}, r2[16] = {}, r3[16] = {};
            int64_t d = 0;
            for (; d + 4 <= D; d += 4) {
              const T x0 = qg[d], x1 = qg[d + 1], x2 = qg[d + 2], x3 = qg[d + 3];
              const T* k0 = k_t + d * np + t0;
              const T* k1 = k0 + np;
              const T* k2 = k1 + np;
              const T* k3 = k2 + np;
              for (int l = 0; l < 16; ++l) {
                r0[l] += x0 * k0[l];
                r1[l] += x1 * k1[l];
                r2[l] += x2 * k2[l];
                r3[l] += x3 * k3[l];
              }
            }
            for (; d < D; ++d) {
              const T x = qg[d];
              const T* kd = k_t + d * np + t0;
              for (int l = 0; l < 16; ++l) r0[l] += x * kd[l];
            }
            for (int l = 0; l < 16; ++l) r0[l] = (r0[l] + r2[l]) + (r1[l] + r3[l]);
            for (int l = 0; l < 16; ++l) {
              const T v = vis[t0 + l] ? r0[l] * sc : minus_inf;
              s[t0 + l] = v;
              mxl[l] = std::max(mxl[l], v);
            }
          }
          T mx = mxl[0];
          for (int l = 1; l < 16; ++l) mx = std::max(mx, mxl[l]);
          kvbench::exp_shifted(s, np, mx);
          T suml[16] = {};
          for (int64_t t0 = 0; t0 < np; t0 += 16) {
            for (int l = 0; l < 16; ++l) {
              // Unseen keys: exactly 0 (the float exp clamps -inf to a tiny positive value).
              const T e = vis[t0 + l] ? s[t0 + l] : T(0);
              s[t0 + l] = e;
              suml[l] += e;
            }
          }
          T sum = 0;
          for (int l = 0; l < 16; ++l) sum += suml[l];
          const T inv = T(1) / sum;
          weigh_values<T, DC>(s, row, vh, slot_stride, n, D, inv, o, acc_heap.data());
        }
      }
    }
  });
}

template <typename T>
void attend_any(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& kv_slots,
                const at::Tensor& q_indptr, const at::Tensor& kv_indptr, const at::Tensor& q_pos, const int8_t* mask,
                const int64_t* mask_indptr, int64_t window, double scale, at::Tensor& out) {
  switch (q.size(2)) {
#define KVBENCH_CASE(DIM) \
  case DIM: return attend<T, DIM>(q, k_cache, v_cache, kv_slots, q_indptr, kv_indptr, q_pos, mask, mask_indptr, window, scale, out);
    KVBENCH_CASE(32)
    KVBENCH_CASE(64)
    KVBENCH_CASE(128)
#undef KVBENCH_CASE
    default:
      return attend<T, 0>(q, k_cache, v_cache, kv_slots, q_indptr, kv_indptr, q_pos, mask, mask_indptr, window, scale,
                          out);
  }
}

}  // namespace

namespace kvbench {
at::Tensor extend_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& kv_slots, const at::Tensor& q_indptr, const at::Tensor& kv_indptr,
                            const at::Tensor& q_pos, const std::optional<at::Tensor>& custom_mask,
                            const std::optional<at::Tensor>& mask_indptr, int64_t window, double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 3 && v_cache.dim() == 3, "q and the caches are [rows, heads, D]");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "contiguous caches only");
  TORCH_CHECK(k_cache.scalar_type() == q.scalar_type() && v_cache.scalar_type() == q.scalar_type(),
              "q and the caches share one dtype");
  TORCH_CHECK(q.size(1) % k_cache.size(1) == 0 && q.size(2) == k_cache.size(2), "head shapes do not match");
  for (const at::Tensor* t : {&kv_slots, &q_indptr, &kv_indptr, &q_pos})
    TORCH_CHECK(t->scalar_type() == at::kLong && t->dim() == 1, "int64 slot rows, indptrs and positions");
  TORCH_CHECK(q_indptr.size(0) == kv_indptr.size(0) && q_pos.size(0) == q.size(0), "one position per query");
  TORCH_CHECK(custom_mask.has_value() == mask_indptr.has_value(), "a custom mask comes with its indptr");
  const at::Tensor qc = q.contiguous(), sl = kv_slots.contiguous(), qi = q_indptr.contiguous(),
                   ki = kv_indptr.contiguous(), ps = q_pos.contiguous();
  at::Tensor m, mi;
  if (custom_mask.has_value()) {
    m = custom_mask->to(at::kChar).contiguous();
    mi = mask_indptr->contiguous();
    TORCH_CHECK(mi.scalar_type() == at::kLong && mi.size(0) == qi.size(0), "int64 mask indptr, one per sequence");
  }
  const int8_t* mp = m.defined() ? m.data_ptr<int8_t>() : nullptr;
  const int64_t* mip = mi.defined() ? mi.data_ptr<int64_t>() : nullptr;
  at::Tensor out = qc.new_empty(qc.sizes());
  if (q.scalar_type() == at::kFloat) {
    attend_any<float>(qc, k_cache, v_cache, sl, qi, ki, ps, mp, mip, window, scale, out);
  } else {
    TORCH_CHECK(q.scalar_type() == at::kDouble, "extend_attention takes float32 or float64");
    attend_any<double>(qc, k_cache, v_cache, sl, qi, ki, ps, mp, mip, window, scale, out);
  }
  return out;
}
}  // namespace kvbench
