// Scalar and auto-vectorised building blocks of the slower scoring paths (sampling with
// temperature, Gumbel noise, filters): half -> float, a polynomial exp, and a chunked sum of
// exp for inverse-CDF draws. The fused T = 0 pass has explicit vector code: row_pass.h.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

namespace unmask::kernels {

template <class To, class From>
inline To bit_cast(From v) {
    To out;
    std::memcpy(&out, &v, sizeof(To));
    return out;
}

// IEEE half bits -> float, exact (normals, subnormals, inf, nan), branch free.
inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;
    uint32_t bits = bit_cast<uint32_t>(bit_cast<float>(em << 13) * 0x1.0p112f);
    bits = em >= 0x7c00u ? (bits | 0x7f800000u) : bits;
    return bit_cast<float>(bits | sign);
}

inline float load(const float* row, int64_t i) { return row[i]; }
inline float load(const uint16_t* row, int64_t i) { return half_to_float(row[i]); }

// exp(x) for x <= 0 within ~2 ulp (Cephes expf polynomial); exactly 0 below -87.
inline float exp_nonpositive(float x) {
    if (x != x) return x;  // NaN stays NaN (and never reaches the float -> int conversion below)
    const float xc = x < -87.0f ? -87.0f : x;
    const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
    const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const float scale = bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
    return x < -87.0f ? 0.0f : p * scale;
}

#if defined(__GNUC__)
// GCC/Clang vector extensions: 8 floats per op, lowered to whatever SIMD the target has
// (2 x SSE2 on baseline x86-64, NEON on arm64), so no -march flag is needed. GCC notes that a
// 32-byte vector return has another ABI under AVX: moot, as every caller compiles this header alike.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

inline v8f exp_nonpositive(v8f x) {
    // The floor is built from a zero vector, not from x: x - x is NaN for x = -inf, which
    // turned exp(-inf) into NaN and made a row holding -inf unscorable at temperature > 0.
    const v8f zero = {};
    const v8f lo = zero - 87.0f;
    const v8i below = x < lo;  // -inf included; NaN compares false and stays NaN below
    const v8f xc = below ? lo : x;
    const v8f n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const v8f r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    v8f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
    v8f scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    const v8f e = p * scale;
    return below ? zero : e;
}
#pragma GCC diagnostic pop
#endif

// Sum of e = exp((l - shift) * scale) and, when WithX, of e * (l - shift) * scale (for entropy).
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // calls the v8f exp above (same note as there)
#endif
template <bool WithX, class T>
inline void sweep_exp(const T* row, int64_t begin, int64_t end, float shift, float scale, double& z, double& zx) {
    int64_t i = begin;
#if defined(__GNUC__)
    v8f za = {}, xa = {};
    for (; i + 8 <= end; i += 8) {
        float lanes[8];
        for (int j = 0; j < 8; ++j) lanes[j] = load(row, i + j);
        v8f x;
        std::memcpy(&x, lanes, sizeof(x));
        x = (x - shift) * scale;
        const v8f e = exp_nonpositive(x);
        za += e;
        if (WithX) xa += (e == 0.0f) ? e : e * x;
    }
    for (int j = 0; j < 8; ++j) {
        z += za[j];
        zx += xa[j];
    }
#endif
    for (; i < end; ++i) {
        const float x = (load(row, i) - shift) * scale;
        const float e = exp_nonpositive(x);
        z += e;
        if (WithX && e != 0.0f) zx += e * x;
    }
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace unmask::kernels
