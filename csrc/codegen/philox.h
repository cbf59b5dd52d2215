// Philox4x32-10, the counter-based random number generator of Salmon, Moraes, Dror and Shaw, "Parallel Random
// Numbers: As Easy as 1, 2, 3" (SC '11): a 128-bit counter and a 64-bit key go through ten rounds of two
// 32x32->64-bit multiplications and xors, the key bumped by two Weyl constants between rounds; the four 32-bit
// words that come out are a pure function of (counter, key). thunder's functional RNG (prims.uniform_philox)
// draws element i of a tensor from the counter (offset + i) under the key `seed`: any element can be computed
// alone, in any order, on any thread, so a kernel regenerates a dropout mask wherever it needs it.
//
// The code is written once, in THUNDER_PHILOX_CODE: compiled into this library (tested against the paper's
// known-answer vectors in tests/cpp/test_codegen.cc) and pasted as text into every CPU kernel's prelude, so the
// kernels run exactly the code the tests check. thunder/executors/torchex.py has the same algorithm in torch's
// int64 tensor ops; the tests check all three agree bit for bit.
//
// Element i, its counter n = offset + i and the key k = seed (as 64-bit unsigned):
//   counter (lo32(n), hi32(n), 0, 0), key (lo32(k), hi32(k)), output words w0..w3;
//   float32 (and the float computing float16/bfloat16): (w0 >> (32 - b)) * 2^-b with b = 24 (float32),
//   11 (float16), 8 (bfloat16) -- an integer of b bits scaled exactly, so every value is representable and < 1;
//   float64: ((w0 << 21) | (w1 >> 11)) * 2^-53.
#pragma once

#include <cstdint>

// No preprocessor lines and no // comments inside: the macro is also stringified.
#define THUNDER_PHILOX_CODE                                                                                   \
  static inline void thunder_philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {                         \
    for (int r = 0; r < 10; ++r) {                                                                            \
      const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];                    \
      const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;            \
      c[0] = n0;                                                                                              \
      c[1] = (uint32_t)p1;                                                                                    \
      c[2] = n2;                                                                                              \
      c[3] = (uint32_t)p0;                                                                                    \
      k0 += 0x9E3779B9u;                                                                                      \
      k1 += 0xBB67AE85u;                                                                                      \
    }                                                                                                         \
  }                                                                                                           \
  static inline float thunder_uniform_float(int64_t seed, int64_t n, int bits) {                              \
    const uint64_t k = (uint64_t)seed, m = (uint64_t)n;                                                       \
    uint32_t c[4] = {(uint32_t)m, (uint32_t)(m >> 32), 0u, 0u};                                               \
    thunder_philox4x32_10(c, (uint32_t)k, (uint32_t)(k >> 32));                                               \
    return (float)(c[0] >> (32 - bits)) * (1.0f / (float)(1u << bits));                                      \
  }                                                                                                           \
  static inline double thunder_uniform_double(int64_t seed, int64_t n) {                                      \
    const uint64_t k = (uint64_t)seed, m = (uint64_t)n;                                                       \
    uint32_t c[4] = {(uint32_t)m, (uint32_t)(m >> 32), 0u, 0u};                                               \
    thunder_philox4x32_10(c, (uint32_t)k, (uint32_t)(k >> 32));                                               \
    return (double)(((uint64_t)c[0] << 21) | (c[1] >> 11)) * (1.0 / 9007199254740992.0);                      \
  }

#define THUNDER_PHILOX_STR2(...) #__VA_ARGS__
#define THUNDER_PHILOX_STR(...) THUNDER_PHILOX_STR2(__VA_ARGS__)

namespace thunder::codegen::philox {

THUNDER_PHILOX_CODE

/// The code above as text, for the kernels' prelude.
inline const char* source() { return THUNDER_PHILOX_STR(THUNDER_PHILOX_CODE); }

/// Philox4x32-10 of `counter` under `key`: the four output words.
inline void philox4x32_10(uint32_t counter[4], uint32_t key0, uint32_t key1) {
  thunder_philox4x32_10(counter, key0, key1);
}

/// Element `n` of the uniform stream of `seed` with `bits` bits of float32 precision (24, 11 or 8).
inline float uniform_float(int64_t seed, int64_t n, int bits) { return thunder_uniform_float(seed, n, bits); }
/// Element `n` of the float64 uniform stream of `seed`.
inline double uniform_double(int64_t seed, int64_t n) { return thunder_uniform_double(seed, n); }

}  // namespace thunder::codegen::philox
