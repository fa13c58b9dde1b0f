// The fused fast path of scoring: ONE read of a logits row gives its top two values, the
// first index of the top one, and the softmax sums relative to the top value
//     z  = sum exp((l - max) * scale),   zx = sum exp((l - max) * scale) * (l - max) * scale.
// Memory bandwidth bounds this pass, so it runs as explicit vector code chosen at load time
// (AVX-512 or AVX2+FMA on x86-64 GCC/Clang) with a portable fallback elsewhere (MSVC, arm64).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace unmask {

// Top value (first index on ties) and second value (the top again when it occurs twice).
struct Top2 {
    float v1 = -std::numeric_limits<float>::infinity();
    float v2 = -std::numeric_limits<float>::infinity();
    int64_t i1 = -1;  // -1 while nothing above -inf was offered (NaN never ranks)
    void offer(float x, int64_t index) {
        const bool up = x > v1 || (x == v1 && index >= 0 && (i1 < 0 || index < i1));
        v2 = std::max(v2, std::min(v1, x));
        if (up) i1 = index;
        v1 = std::max(v1, x);
    }
};

struct RowPass {
    Top2 top;
    double z = 0.0;   // NaN when the row holds NaN or +inf; 0 when top.i1 < 0
    double zx = 0.0;  // only when asked (entropy)
};

// Over [0, vocab) minus the sorted ids in `skip`. Exponentials are float32 (~1 ulp), summed
// in float32 per lane over short chunks and in float64 across chunks; terms below
// exp(-87) count as exp(-87) (no subnormals), which moves z by less than vocab * 1.7e-38.
RowPass row_pass(const float* row, int64_t vocab, const std::vector<int64_t>& skip, float scale, bool with_x);
RowPass row_pass(const uint16_t* row, int64_t vocab, const std::vector<int64_t>& skip, float scale, bool with_x);

// The kernel in use: "avx512", "avx2" or "portable". The environment variable UNMASK_SIMD
// (same names) caps the choice, read once; for benchmarks and testing the fallbacks.
const char* row_pass_isa();

// What a kernel file exports: per-lane partial results, combined by row_pass.
namespace row_lanes {

constexpr int kMaxLanes = 64;

struct Lanes {
    int count = 0;
    float v1[kMaxLanes], v2[kMaxLanes], shift[kMaxLanes];  // shift: the lane's running max (>= -FLT_MAX)
    int32_t i1[kMaxLanes];
    double z[kMaxLanes], zx[kMaxLanes];  // relative to the lane's shift
};

struct Kernel {
    const char* name;
    void (*f32)(const float* row, int64_t vocab, const int64_t* skip, size_t nskip, float scale, bool with_x,
                Lanes& out);
    void (*f16)(const uint16_t* row, int64_t vocab, const int64_t* skip, size_t nskip, float scale, bool with_x,
                Lanes& out);
};

Kernel portable_kernel();
#if defined(__x86_64__) && defined(__GNUC__)
#define UNMASK_X86_KERNELS 1
Kernel avx2_kernel();
Kernel avx512_kernel();
#endif

}  // namespace row_lanes
}  // namespace unmask
