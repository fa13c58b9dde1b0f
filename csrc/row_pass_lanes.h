// The row pass written once over a vector type V (a small traits struct per instruction set:
// AVX-512, AVX2+FMA, portable). Included only by the kernel files, each after selecting its
// instruction set; everything here has internal linkage so no copy compiled for one set can be
// picked by the linker for another.
//
// Online softmax, one read of memory: the row goes by in chunks small enough for L1; the first
// sweep of a chunk updates each lane's top two and max, the second re-reads the chunk from L1
// and sums exp(l - lane max). When a lane's max rises, its float64 sums are rescaled once per
// chunk, so the exponent argument is always <= 0 and no sum overflows.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels.h"
#include "row_pass.h"

namespace unmask::row_lanes {
namespace {

constexpr int kUnroll = 4;        // independent vectors per step: hides the add/max latency
constexpr int64_t kChunk = 2048;  // elements per chunk: 8 KB of float32 stays in L1 for the second sweep
constexpr float kExpFloor = -87.0f;  // exp(-87) is still a normal float: no slow subnormals

// exp(d) for d in [kExpFloor, 0] or NaN, ~1 ulp: Cephes expf (Cody-Waite reduction by
// ln 2 in two parts, degree-6 polynomial) with fused multiply-adds.
template <class V>
inline typename V::F exp_reduced(typename V::F d) {
    using F = typename V::F;
    const F n = V::round(V::mul(d, V::set1(1.44269504088896341f)));
    F r = V::fma(n, V::set1(-0.693359375f), d);
    r = V::fma(n, V::set1(2.12194440e-4f), r);
    F p = V::set1(1.9875691500e-4f);
    p = V::fma(p, r, V::set1(1.3981999507e-3f));
    p = V::fma(p, r, V::set1(8.3334519073e-3f));
    p = V::fma(p, r, V::set1(4.1665795894e-2f));
    p = V::fma(p, r, V::set1(1.6666665459e-1f));
    p = V::fma(p, r, V::set1(5.0000001201e-1f));
    p = V::add(V::fma(p, V::mul(r, r), r), V::set1(1.0f));
    return V::ldexp(p, n);
}

template <class V>
struct LaneState {
    static constexpr int kLanes = V::W * kUnroll;
    static_assert(kLanes <= kMaxLanes, "Lanes holds at most kMaxLanes");
    typename V::F v1[kUnroll], v2[kUnroll];
    typename V::I i1[kUnroll];
    float shift[kLanes];  // the max each lane's sums are relative to
    double z[kLanes], zx[kLanes];

    LaneState() {
        for (int u = 0; u < kUnroll; ++u) {
            v1[u] = v2[u] = V::set1(-INFINITY);
            i1[u] = V::iset1(-1);
        }
        for (int j = 0; j < kLanes; ++j) {
            shift[j] = -FLT_MAX;  // finite, so an all -inf lane gives exp(-inf) = 0, not NaN
            z[j] = zx[j] = 0.0;
        }
    }
};

// First sweep: per lane, strict > keeps the first index of the top value (lanes see
// increasing indices); the second value takes the top again when it repeats.
template <class V, class T>
inline void sweep_top2(const T* x, int64_t n, int32_t first, LaneState<V>& s) {
    using F = typename V::F;
    using I = typename V::I;
    F v1[kUnroll], v2[kUnroll];  // locals, so the loop keeps them in registers
    I i1[kUnroll], index[kUnroll];
    for (int u = 0; u < kUnroll; ++u) {
        v1[u] = s.v1[u];
        v2[u] = s.v2[u];
        i1[u] = s.i1[u];
        index[u] = V::iadd(V::iota(), V::iset1(first + u * V::W));
    }
    const I step = V::iset1(LaneState<V>::kLanes);
    for (int64_t i = 0; i < n; i += LaneState<V>::kLanes) {
        for (int u = 0; u < kUnroll; ++u) {
            const F v = V::load(x + i + u * V::W);
            v2[u] = V::max(v2[u], V::min(v, v1[u]));
            const auto up = V::gt(v, v1[u]);
            v1[u] = V::select(up, v, v1[u]);
            i1[u] = V::select(up, index[u], i1[u]);
            index[u] = V::iadd(index[u], step);
        }
    }
    for (int u = 0; u < kUnroll; ++u) {
        s.v1[u] = v1[u];
        s.v2[u] = v2[u];
        s.i1[u] = i1[u];
    }
}

// After a lane's max rose from a to b: its sums become relative to b.
template <class V>
inline void rescale(LaneState<V>& s, float scale) {
    float top[LaneState<V>::kLanes];
    for (int u = 0; u < kUnroll; ++u) V::store(top + u * V::W, s.v1[u]);
    for (int j = 0; j < LaneState<V>::kLanes; ++j) {
        const float next = top[j] > -FLT_MAX ? top[j] : -FLT_MAX;
        if (next == s.shift[j]) continue;
        const double delta = (static_cast<double>(s.shift[j]) - next) * scale;  // < 0 (NaN when next is +inf)
        const double f = std::exp(delta);
        s.zx[j] = f * (s.zx[j] + delta * s.z[j]);
        s.z[j] *= f;
        s.shift[j] = next;
    }
}

// Second sweep over the same chunk (now in L1): float32 sums per lane, added to float64 at the end.
template <class V, bool WithX, class T>
inline void sweep_exp(const T* x, int64_t n, float scale, LaneState<V>& s) {
    using F = typename V::F;
    F shift[kUnroll], z[kUnroll], zx[kUnroll];
    const F k = V::set1(scale), floor = V::set1(kExpFloor);
    for (int u = 0; u < kUnroll; ++u) {
        shift[u] = V::load(s.shift + u * V::W);
        z[u] = zx[u] = V::set1(0.0f);
    }
    for (int64_t i = 0; i < n; i += LaneState<V>::kLanes) {
        for (int u = 0; u < kUnroll; ++u) {
            // max(floor, d) keeps a NaN d (floor > NaN is false), so NaN logits reach the sum.
            const F d = V::max(floor, V::mul(V::sub(V::load(x + i + u * V::W), shift[u]), k));
            const F e = exp_reduced<V>(d);
            z[u] = V::add(z[u], e);
            if (WithX) zx[u] = V::fma(e, d, zx[u]);
        }
    }
    float lane_z[LaneState<V>::kLanes], lane_zx[LaneState<V>::kLanes];
    for (int u = 0; u < kUnroll; ++u) {
        V::store(lane_z + u * V::W, z[u]);
        V::store(lane_zx + u * V::W, zx[u]);
    }
    for (int j = 0; j < LaneState<V>::kLanes; ++j) {
        s.z[j] += lane_z[j];
        if (WithX) s.zx[j] += lane_zx[j];
    }
}

// n: a multiple of the lane count; `first` is the row index of x[0].
template <class V, bool WithX, class T>
inline void sweep_chunk(const T* x, int64_t n, int64_t first, float scale, LaneState<V>& s) {
    sweep_top2<V>(x, n, static_cast<int32_t>(first), s);
    rescale<V>(s, scale);
    sweep_exp<V, WithX>(x, n, scale, s);
}

template <class V, bool WithX, class T>
void sweep_segment(const T* row, int64_t begin, int64_t end, float scale, LaneState<V>& s) {
    constexpr int64_t lanes = LaneState<V>::kLanes;
    int64_t i = begin;
    while (end - i >= lanes) {
        const int64_t n = std::min<int64_t>(kChunk, (end - i) / lanes * lanes);
        sweep_chunk<V, WithX>(row + i, n, i, scale, s);
        i += n;
    }
    if (i < end) {  // the ragged end, padded with -inf (never ranks, exp gives the floor)
        float tail[lanes];
        for (int64_t j = 0; j < lanes; ++j) tail[j] = i + j < end ? kernels::load(row, i + j) : -INFINITY;
        sweep_chunk<V, WithX>(tail, lanes, i, scale, s);
    }
}

template <class V, bool WithX, class T>
void sweep_row(const T* row, int64_t vocab, const int64_t* skip, size_t nskip, float scale, Lanes& out) {
    LaneState<V> s;
    int64_t begin = 0;
    for (size_t k = 0; k < nskip && skip[k] < vocab; ++k) {
        if (skip[k] > begin) sweep_segment<V, WithX>(row, begin, skip[k], scale, s);
        begin = std::max(begin, skip[k] + 1);
    }
    if (begin < vocab) sweep_segment<V, WithX>(row, begin, vocab, scale, s);

    out.count = LaneState<V>::kLanes;
    for (int u = 0; u < kUnroll; ++u) {
        V::store(out.v1 + u * V::W, s.v1[u]);
        V::store(out.v2 + u * V::W, s.v2[u]);
        V::store(out.i1 + u * V::W, s.i1[u]);
    }
    for (int j = 0; j < LaneState<V>::kLanes; ++j) {
        out.shift[j] = s.shift[j];
        out.z[j] = s.z[j];
        out.zx[j] = s.zx[j];
    }
}

template <class V, class T>
void row_kernel(const T* row, int64_t vocab, const int64_t* skip, size_t nskip, float scale, bool with_x,
                Lanes& out) {
    if (with_x)
        sweep_row<V, true>(row, vocab, skip, nskip, scale, out);
    else
        sweep_row<V, false>(row, vocab, skip, nskip, scale, out);
}

template <class V>
Kernel kernel_of(const char* name) {
    return Kernel{name, &row_kernel<V, float>, &row_kernel<V, uint16_t>};
}

}  // namespace
}  // namespace unmask::row_lanes
