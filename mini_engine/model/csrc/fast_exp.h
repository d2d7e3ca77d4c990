// exp(x) for float as a branch-free polynomial (Cephes' expf, within 2 ulp of the true
// value) that the compiler vectorises; a libm call per element costs as much as the
// rest of a decode kernel. x is clamped to [-87, 88]: exp(-87) ~ 1.6e-38 is nil next
// to any weight that matters, exp(88) ~ 1.7e38 still a finite float.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kvbench {

inline float fast_exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // floor(y + 0.5) by truncation of a positive number (the clamp keeps it above zero).
  const float fn = static_cast<float>(static_cast<int32_t>(x * 1.44269504088896341f + 128.5f) - 128);
  float r = x - fn * 0.693359375f;
  r = r + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(fn) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace kvbench
