// Paged decode attention on a CPU: one query per sequence, keys read in place.
//
// The pure-torch decode path gathers every page of every sequence into a padded
// [B, KV heads, keys, D] copy, builds an additive mask and calls SDPA: per step that
// is two copies and a masked kernel per layer, most of a tiny model's step time.
// Here each (sequence, KV head) walks its own positions through the page table,
// straight from the pool, for each query head sharing the KV head: its scores, an
// exact softmax (max, exp, sum), then the weighted sum of values. No copy, no mask,
// no padding; positions outside the window are never visited.
//
// Registered as torch.ops.kvbench_cpu.decode_attention (register.cpp); decode_layer.cpp
// calls it directly.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <vector>

#include "attend_math.h"
#include "ops.h"

namespace {

// Calls f(j, slot) for positions lo <= lo + j < len, a page at a time: one table read
// per page and no division per key (a 64-bit divide costs tens of cycles).
template <typename F>
inline void for_each_slot(const int64_t* pages, int64_t page_size, int64_t lo, int64_t len, F&& f) {
  int64_t pos = lo;
  while (pos < len) {
    const int64_t page = pos / page_size;
    const int64_t stop = std::min(len, (page + 1) * page_size);
    const int64_t base = pages[page] * page_size - page * page_size;  // slot of pos = base + pos
    for (; pos < stop; ++pos) f(pos - lo, base + pos);
  }
}

// s[j] = scale * q . k(lo + j) for the positions lo <= p < len of one sequence and KV head.
template <typename T>
inline void key_scores(const T* q, const T* kh, int64_t slot_stride, const int64_t* pages, int64_t page_size, int64_t lo,
                   int64_t len, int64_t D, T scale, T* s) {
  for_each_slot(pages, page_size, lo, len, [&](int64_t j, int64_t slot) { s[j] = kvbench::dot(q, kh + slot * slot_stride, D) * scale; });
}

#if defined(__AVX512F__)
// 16 vectors in, one out: lane t holds the sum of v[t]'s 16 lanes. A transpose-and-add
// tree (45 shuffles and adds for 16 keys) instead of a horizontal sum per key (a dozen
// dependent instructions each): the reduction, not the products, bounds a short head.
inline __m512 reduce16(__m512* v) {
  __m512 p[8], w[4];
  for (int i = 0; i < 8; ++i)  // lanes: (v[2i], v[2i+1]) partial sums, alternating
    p[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // each 128-bit lane: partial sums of v[4i .. 4i+3]
    const __m512d a = _mm512_castps_pd(p[2 * i]), b = _mm512_castps_pd(p[2 * i + 1]);
    w[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x44), _mm512_shuffle_f32x4(w[0], w[1], 0xEE));
  const __m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], 0x44), _mm512_shuffle_f32x4(w[2], w[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}

template <>
inline void key_scores<float>(const float* q, const float* kh, int64_t slot_stride, const int64_t* pages,
                          int64_t page_size, int64_t lo, int64_t len, int64_t D, float scale, float* s) {
  if (D % 16 != 0 || D > 256) {
    for_each_slot(pages, page_size, lo, len, [&](int64_t j, int64_t slot) { s[j] = kvbench::dot(q, kh + slot * slot_stride, D) * scale; });
    return;
  }
  const int64_t C = D / 16;
  __m512 qv[16];
  for (int64_t c = 0; c < C; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
  const __m512 sv = _mm512_set1_ps(scale);
  int64_t pos = lo;
  while (pos < len) {  // runs of up to 16 consecutive slots inside one page
    const int64_t page = pos / page_size;
    const int64_t stop = std::min({len, (page + 1) * page_size, pos + 16});
    const float* k0 = kh + (pages[page] * page_size + pos - page * page_size) * slot_stride;
    const int64_t cnt = stop - pos;
    __m512 v[16];
    for (int64_t t = 0; t < 16; ++t) {
      __m512 acc = _mm512_setzero_ps();
      if (t < cnt) {
        const float* kr = k0 + t * slot_stride;
        for (int64_t c = 0; c < C; ++c) acc = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kr + 16 * c), acc);
      }
      v[t] = acc;
    }
    _mm512_mask_storeu_ps(s + (pos - lo), static_cast<__mmask16>((1u << cnt) - 1), _mm512_mul_ps(reduce16(v), sv));
    pos = stop;
  }
}
#endif

// One (sequence, KV head) pair, one query head g at a time: its scores over the visible
// keys, an exact softmax, then the weighted values. DC is the head dim when known at
// compile time (the accumulator then lives in registers), 0 for any other.
template <typename T, int DC>
void attend(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& pages,
            const at::Tensor& lens, int64_t page_size, int64_t window, double scale, at::Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), D = DC > 0 ? DC : q.size(2);
  const int64_t KVH = k_cache.size(1), G = H / KVH, P = pages.size(1);
  const T* qp = q.data_ptr<T>();
  const T* kp = k_cache.data_ptr<T>();
  const T* vp = v_cache.data_ptr<T>();
  const int64_t* pg = pages.data_ptr<int64_t>();
  const int64_t* ln = lens.data_ptr<int64_t>();
  T* op = out.data_ptr<T>();
  const int64_t slot_stride = KVH * D;  // caches are [slots, KVH, D], contiguous
  const T sc = static_cast<T>(scale);
  at::parallel_for(0, B * KVH, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> scores;
    std::vector<T> acc_heap(DC > 0 ? 0 : D);
    for (int64_t w = begin; w < end; ++w) {
      const int64_t b = w / KVH, h = w % KVH;
      const int64_t len = std::min(ln[b], P * page_size);
      // The window keeps key j when q_pos - j < window, with q_pos = len - 1.
      const int64_t lo = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      const int64_t n = len - lo;
      scores.resize(std::max<int64_t>(n, 1));
      T* s = scores.data();
      const T* kh = kp + h * D;
      const T* vh = vp + h * D;
      for (int64_t g = 0; g < G; ++g) {
        const T* qg = qp + (b * H + h * G + g) * D;
        T* o = op + (b * H + h * G + g) * D;
        if (n <= 0) {
          std::fill(o, o + D, T(0));
          continue;
        }
        key_scores(qg, kh, slot_stride, pg + b * P, page_size, lo, len, D, sc, s);
        if (g == 0) {
          // The pool is far larger than any cache: ask for the value rows now, the
          // weighted sum below reads them after the softmax.
          for_each_slot(pg + b * P, page_size, lo, len, [&](int64_t, int64_t slot) {
            const char* vr = reinterpret_cast<const char*>(vh + slot * slot_stride);
            for (int64_t off = 0; off < D * static_cast<int64_t>(sizeof(T)); off += 64) __builtin_prefetch(vr + off);
          });
        }
        T mx = s[0];
        for (int64_t j = 1; j < n; ++j) mx = std::max(mx, s[j]);
        kvbench::exp_shifted(s, n, mx);
        T sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += s[j];
        const T inv = T(1) / sum;
        T acc_reg[DC > 0 ? DC : 1] = {};
        T* acc = DC > 0 ? acc_reg : acc_heap.data();
        if (DC == 0) std::fill(acc, acc + D, T(0));
        for_each_slot(pg + b * P, page_size, lo, len, [&](int64_t j, int64_t slot) {
          const T p = s[j];
          const T* vr = vh + slot * slot_stride;
          for (int64_t d = 0; d < D; ++d) acc[d] += p * vr[d];
        });
        for (int64_t d = 0; d < D; ++d) o[d] = acc[d] * inv;
      }
    }
  });
}

template <typename T>
void attend_any(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& pages,
                const at::Tensor& lens, int64_t page_size, int64_t window, double scale, at::Tensor& out) {
  switch (q.size(2)) {
    case 32: return attend<T, 32>(q, k_cache, v_cache, pages, lens, page_size, window, scale, out);
    case 64: return attend<T, 64>(q, k_cache, v_cache, pages, lens, page_size, window, scale, out);
    case 128: return attend<T, 128>(q, k_cache, v_cache, pages, lens, page_size, window, scale, out);
    default: return attend<T, 0>(q, k_cache, v_cache, pages, lens, page_size, window, scale, out);
  }
}

void attention_into(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& pages,
                    const at::Tensor& lens, int64_t page_size, int64_t window, double scale, at::Tensor& out) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 3 && v_cache.dim() == 3, "q and the caches are [rows, heads, D]");
  TORCH_CHECK(q.is_contiguous() && k_cache.is_contiguous() && v_cache.is_contiguous(), "contiguous tensors only");
  TORCH_CHECK(k_cache.scalar_type() == q.scalar_type() && v_cache.scalar_type() == q.scalar_type(),
              "q and the caches share one dtype");
  TORCH_CHECK(q.size(1) % k_cache.size(1) == 0 && q.size(2) == k_cache.size(2), "head shapes do not match");
  TORCH_CHECK(pages.dim() == 2 && pages.size(0) == q.size(0) && lens.size(0) == q.size(0), "one page row per query");
  TORCH_CHECK(pages.scalar_type() == at::kLong && lens.scalar_type() == at::kLong, "int64 page table and lengths");
  TORCH_CHECK(out.is_contiguous() && out.sizes() == q.sizes() && out.scalar_type() == q.scalar_type(), "out like q");
  at::Tensor p = pages.contiguous(), l = lens.contiguous();
  if (q.scalar_type() == at::kFloat) {
    attend_any<float>(q, k_cache, v_cache, p, l, page_size, window, scale, out);
  } else if (q.scalar_type() == at::kDouble) {
    attend_any<double>(q, k_cache, v_cache, p, l, page_size, window, scale, out);
  } else {
    TORCH_CHECK(false, "decode_attention takes float32 or float64");
  }
}

}  // namespace

namespace kvbench {
void decode_attention_into(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& pages, const at::Tensor& lens, int64_t page_size, int64_t window,
                           double scale, at::Tensor& out) {
  attention_into(q, k_cache, v_cache, pages, lens, page_size, window, scale, out);
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& pages, const at::Tensor& lens, int64_t page_size, int64_t window,
                            double scale) {
  at::Tensor out = q.new_empty(q.sizes());  // attention_into checks q is contiguous: so is this
  attention_into(q, k_cache, v_cache, pages, lens, page_size, window, scale, out);
  return out;
}
}  // namespace kvbench
