// Picks the row-pass kernel for this CPU once, and combines a kernel's lanes into one result.
// Also defines the portable kernel: the same algorithm over plain 8-float arrays, which any
// compiler can vectorise for its baseline (SSE2 on x86-64, NEON on arm64).
#include "row_pass.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels.h"
#include "row_pass_lanes.h"

namespace unmask {
namespace row_lanes {
namespace {

struct Portable {
    static constexpr int W = 8;
    struct F { float v[W]; };
    struct I { int32_t v[W]; };
    struct M { bool v[W]; };

    template <class Out, class Op>
    static Out each(Op op) {
        Out out;
        for (int j = 0; j < W; ++j) out.v[j] = op(j);
        return out;
    }
    static F load(const float* p) { return each<F>([&](int j) { return p[j]; }); }
    static F load(const uint16_t* p) { return each<F>([&](int j) { return kernels::half_to_float(p[j]); }); }
    static void store(float* p, F a) { std::memcpy(p, a.v, sizeof(a.v)); }
    static void store(int32_t* p, I a) { std::memcpy(p, a.v, sizeof(a.v)); }
    static F set1(float x) { return each<F>([&](int) { return x; }); }
    static I iset1(int32_t x) { return each<I>([&](int) { return x; }); }
    static I iota() { return each<I>([](int j) { return static_cast<int32_t>(j); }); }
    static I iadd(I a, I b) { return each<I>([&](int j) { return a.v[j] + b.v[j]; }); }
    static F add(F a, F b) { return each<F>([&](int j) { return a.v[j] + b.v[j]; }); }
    static F sub(F a, F b) { return each<F>([&](int j) { return a.v[j] - b.v[j]; }); }
    static F mul(F a, F b) { return each<F>([&](int j) { return a.v[j] * b.v[j]; }); }
    // a * b + c, not std::fma: without FMA hardware std::fma is a slow library call.
    static F fma(F a, F b, F c) { return each<F>([&](int j) { return a.v[j] * b.v[j] + c.v[j]; }); }
    static F max(F a, F b) { return each<F>([&](int j) { return a.v[j] > b.v[j] ? a.v[j] : b.v[j]; }); }
    static F min(F a, F b) { return each<F>([&](int j) { return a.v[j] < b.v[j] ? a.v[j] : b.v[j]; }); }
    static M gt(F a, F b) { return each<M>([&](int j) { return a.v[j] > b.v[j]; }); }
    static F select(M m, F a, F b) { return each<F>([&](int j) { return m.v[j] ? a.v[j] : b.v[j]; }); }
    static I select(M m, I a, I b) { return each<I>([&](int j) { return m.v[j] ? a.v[j] : b.v[j]; }); }
    static F round(F x) {  // to nearest for |x| < 2^22: adding 1.5 * 2^23 drops the fraction bits
        return each<F>([&](int j) { return (x.v[j] + 12582912.0f) - 12582912.0f; });
    }
    static F ldexp(F p, F n) {  // n in [-126, 0] (or NaN, with p NaN too)
        return each<F>([&](int j) {
            const int32_t e = n.v[j] == n.v[j] ? static_cast<int32_t>(n.v[j]) : 0;
            return p.v[j] * kernels::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
        });
    }
};

}  // namespace

Kernel portable_kernel() { return kernel_of<Portable>("portable"); }

}  // namespace row_lanes

namespace {

using row_lanes::Kernel;

// The widest kernel both the CPU and UNMASK_SIMD allow.
Kernel pick_kernel() {
    const char* cap_env = std::getenv("UNMASK_SIMD");
    const std::string cap = cap_env ? cap_env : "";
#if defined(UNMASK_X86_KERNELS)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (cap != "avx2" && cap != "portable" && __builtin_cpu_supports("avx512f") && avx2)
        return row_lanes::avx512_kernel();
    if (cap != "portable" && avx2) return row_lanes::avx2_kernel();  // x86 CPUs with AVX2 all have F16C
#endif
    return row_lanes::portable_kernel();
}

const Kernel& kernel() {
    static const Kernel k = pick_kernel();
    return k;
}

// Lane results -> one top-2 and sums relative to the row max:
// exp(l - m) = exp(l - shift_j) * exp(shift_j - m), and the entropy term gains (shift_j - m) * z_j.
RowPass combine(const row_lanes::Lanes& lanes, float scale, bool with_x) {
    RowPass out;
    for (int j = 0; j < lanes.count; ++j) {
        if (lanes.i1[j] < 0) continue;
        out.top.offer(lanes.v1[j], lanes.i1[j]);
        out.top.offer(lanes.v2[j], INT64_MAX);  // a value only: never the first index
    }
    if (out.top.i1 < 0) return out;
    const double m = out.top.v1;
    for (int j = 0; j < lanes.count; ++j) {
        const double delta = (lanes.shift[j] - m) * scale;
        const double f = std::exp(delta);
        out.z += f * lanes.z[j];
        if (with_x) out.zx += f * (lanes.zx[j] + delta * lanes.z[j]);
    }
    return out;
}

}  // namespace

RowPass row_pass(const float* row, int64_t vocab, const std::vector<int64_t>& skip, float scale, bool with_x) {
    row_lanes::Lanes lanes;
    kernel().f32(row, vocab, skip.data(), skip.size(), scale, with_x, lanes);
    return combine(lanes, scale, with_x);
}

RowPass row_pass(const uint16_t* row, int64_t vocab, const std::vector<int64_t>& skip, float scale, bool with_x) {
    row_lanes::Lanes lanes;
    kernel().f16(row, vocab, skip.data(), skip.size(), scale, with_x, lanes);
    return combine(lanes, scale, with_x);
}

const char* row_pass_isa() { return kernel().name; }

}  // namespace unmask
