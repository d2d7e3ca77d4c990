// The inner loops both attention kernels share: a short dot product and the shifted
// exponentials of an exact softmax.
#pragma once

#include <cmath>
#include <cstdint>

#include "fast_exp.h"

namespace kvbench {

// A dot product over 16 independent lanes reduced as a tree: the compiler turns the
// lanes into one or two vector registers. (Four partial sums reduced one by one were
// three times slower: the reduction, not the products, bounds a short head dim.)
template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  T acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) acc[i & 15] += a[i] * b[i];
  for (int l = 0; l < 8; ++l) acc[l] += acc[l + 8];
  for (int l = 0; l < 4; ++l) acc[l] += acc[l + 4];
  return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

// s[j] = exp(s[j] - mx) over an array (the shifted scores are <= 0).
inline void exp_shifted(float* s, int64_t n, float mx) {
  for (int64_t j = 0; j < n; ++j) s[j] = fast_exp(s[j] - mx);
}

inline void exp_shifted(double* s, int64_t n, double mx) {
  for (int64_t j = 0; j < n; ++j) s[j] = std::exp(s[j] - mx);
}

}  // namespace kvbench
