// The row pass on AVX2+FMA+F16C: 8 lanes per vector, blends for the top-2 select,
// vcvtph2ps for float16 rows, exponent bits for 2^n. Compiled for AVX2 by pragma (the rest
// of the build stays portable); used only when the CPU reports avx2, fma and f16c.
#include "row_pass.h"

#if defined(UNMASK_X86_KERNELS)
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels.h"

// Everything defined from here on is compiled for AVX2 (headers above stay baseline).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "row_pass_lanes.h"

namespace unmask::row_lanes {
namespace {

struct Avx2 {
    static constexpr int W = 8;
    using F = __m256;
    using I = __m256i;
    using M = __m256;  // all-ones lanes where true
    static F load(const float* p) { return _mm256_loadu_ps(p); }
    static F load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
    static void store(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
    static F set1(float v) { return _mm256_set1_ps(v); }
    static I iset1(int32_t v) { return _mm256_set1_epi32(v); }
    static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
    static I iadd(I a, I b) { return _mm256_add_epi32(a, b); }
    static F add(F a, F b) { return _mm256_add_ps(a, b); }
    static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F max(F a, F b) { return _mm256_max_ps(a, b); }  // a > b ? a : b
    static F min(F a, F b) { return _mm256_min_ps(a, b); }  // a < b ? a : b
    static M gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
    static F select(M m, F a, F b) { return _mm256_blendv_ps(b, a, m); }
    static I select(M m, I a, I b) {
        return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(a), m));
    }
    static F round(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static F ldexp(F p, F n) {  // p * 2^n for n in [-126, 0]: n lands in the exponent field
        const I bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    }
};

}  // namespace

Kernel avx2_kernel() { return kernel_of<Avx2>("avx2"); }

}  // namespace unmask::row_lanes

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // UNMASK_X86_KERNELS
