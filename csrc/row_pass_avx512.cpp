// The row pass on AVX-512F: 16 lanes per vector, mask registers for the top-2 select,
// vcvtph2ps for float16 rows, vscalefps for the exponent. Compiled for AVX-512 by pragma
// (the rest of the build stays portable); used only when the CPU reports avx512f.
#include "row_pass.h"

#if defined(UNMASK_X86_KERNELS)
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels.h"

// Everything defined from here on is compiled for AVX-512 (headers above stay baseline).
// GCC 12's AVX-512 intrinsics trip a false -Wmaybe-uninitialized (`__Y = __Y`, GCC bug 105593).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "row_pass_lanes.h"

namespace unmask::row_lanes {
namespace {

struct Avx512 {
    static constexpr int W = 16;
    using F = __m512;
    using I = __m512i;
    using M = __mmask16;
    static F load(const float* p) { return _mm512_loadu_ps(p); }
    static F load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
    static void store(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
    static F set1(float v) { return _mm512_set1_ps(v); }
    static I iset1(int32_t v) { return _mm512_set1_epi32(v); }
    static I iota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
    static I iadd(I a, I b) { return _mm512_add_epi32(a, b); }
    static F add(F a, F b) { return _mm512_add_ps(a, b); }
    static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F max(F a, F b) { return _mm512_max_ps(a, b); }  // a > b ? a : b
    static F min(F a, F b) { return _mm512_min_ps(a, b); }  // a < b ? a : b
    static M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
    static F select(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
    static I select(M m, I a, I b) { return _mm512_mask_blend_epi32(m, b, a); }
    static F round(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static F ldexp(F p, F n) { return _mm512_scalef_ps(p, n); }  // p * 2^n
};

}  // namespace

Kernel avx512_kernel() { return kernel_of<Avx512>("avx512"); }

}  // namespace unmask::row_lanes

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

#endif  // UNMASK_X86_KERNELS
