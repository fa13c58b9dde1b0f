// Scoring a row. Fast path (no top-k/top-p): row_pass, one read of the row for max / argmax /
// second max and the softmax sums (explicit vector code, float16 converted on the fly).
// Temperature draws add a chunked exp sweep; filters and Gumbel noise take a scalar path.
#include "scoring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "errors.h"
#include "kernels.h"
#include "parallel.h"
#include "row_pass.h"

namespace unmask {
namespace {

using kernels::load;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kChunk = 2048;  // exp sums are accumulated per chunk in double

// Calls fn(begin, end) over [0, vocab) minus the sorted ids in `skip`.
template <class F>
void for_segments(int64_t vocab, const std::vector<int64_t>& skip, F&& fn) {
    int64_t begin = 0;
    for (int64_t id : skip) {
        if (id >= vocab) break;
        if (id > begin) fn(begin, id);
        begin = std::max(begin, id + 1);
    }
    if (begin < vocab) fn(begin, vocab);
}

bool contains(const std::vector<int64_t>& sorted, int64_t id) {
    return std::binary_search(sorted.begin(), sorted.end(), id);
}

// One rule on every path: a row is unscorable when a logit the sampler may pick is NaN or
// +inf, or when every such logit is -inf. Banned ids (mask; EOS under logits_eos_inf) are
// never read, so their values do not matter. -inf elsewhere is an ordinary "never".
bool usable(float logit) { return logit < std::numeric_limits<float>::infinity(); }  // false for NaN too

struct ExpChunk {
    int64_t begin, end;
    double z;
};

// Sum over the row (minus skip) of exp((l - shift) * scale); zx: of the same times the exponent.
template <class T>
void exp_sums(const T* row, int64_t vocab, const std::vector<int64_t>& skip, float shift, float scale, bool with_x,
              double& z, double& zx, std::vector<ExpChunk>* chunks) {
    z = zx = 0.0;
    for_segments(vocab, skip, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; c += kChunk) {
            const int64_t ce = std::min(e, c + kChunk);
            double cz = 0.0, czx = 0.0;
            if (with_x)
                kernels::sweep_exp<true>(row, c, ce, shift, scale, cz, czx);
            else
                kernels::sweep_exp<false>(row, c, ce, shift, scale, cz, czx);
            z += cz;
            zx += czx;
            if (chunks) chunks->push_back({c, ce, cz});
        }
    });
}

// Inverse-CDF draw over chunked exp sums (categorical sampling, Dream).
template <class T>
int64_t draw_from_chunks(const T* row, const std::vector<ExpChunk>& chunks, double total, float shift, float scale,
                         double u) {
    double target = u * total;
    const ExpChunk* last = nullptr;
    for (const ExpChunk& c : chunks) {
        if (c.z <= 0.0) continue;
        last = &c;
        if (target < c.z) break;
        target -= c.z;
    }
    if (last == nullptr) return -1;
    int64_t pick = -1;
    double acc = 0.0;
    for (int64_t v = last->begin; v < last->end; ++v) {
        const double e = kernels::exp_nonpositive((load(row, v) - shift) * scale);
        if (e <= 0.0) continue;
        pick = v;
        acc += e;
        if (acc > target) break;
    }
    return pick;
}

using Support = std::vector<std::pair<int64_t, double>>;  // (token, scaled logit)

// Value descending, ties lowest token first.
bool higher(const std::pair<int64_t, double>& a, const std::pair<int64_t, double>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
}

// Nucleus filter: keep tokens, by value descending, while the mass before them is <= top_p.
void keep_nucleus(Support& all, double top_p) {
    double m = kNegInf, z = 0.0;
    for (auto& t : all) m = std::max(m, t.second);
    for (auto& t : all) z += std::exp(t.second - m);
    size_t have = std::min<size_t>(all.size(), 1024), kept = all.size();
    for (;;) {
        std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(have), all.end(), higher);
        double cum = 0.0;
        size_t j = 0;
        for (; j < have; ++j) {  // keep j while the mass before it is <= top_p
            if (j > 0 && cum > top_p) break;
            cum += std::exp(all[j].second - m) / z;
        }
        if (j < have || have == all.size()) {
            kept = j;
            break;
        }
        have = std::min(all.size(), have * 8);
    }
    all.resize(kept);
}

// Top-k filter: drop tokens below the k-th largest value (ties with it stay).
void keep_top_k(Support& all, int64_t top_k) {
    if (static_cast<size_t>(top_k) >= all.size()) return;
    const auto k = static_cast<std::ptrdiff_t>(top_k);
    std::nth_element(all.begin(), all.begin() + (k - 1), all.end(), higher);
    const double kth = all[static_cast<size_t>(k - 1)].second;
    all.erase(std::remove_if(all.begin(), all.end(), [&](auto& t) { return t.second < kth; }), all.end());
}

// The filters (temperature first, then top-p and top-k in the family's order) and the
// resulting distribution. Returns the kept (token, scaled logit) pairs; tokens outside have
// probability 0. Empty when the row is unscorable (see usable()): NaN would also break the
// sorts' strict weak order.
template <class T>
Support filtered_support(const T* row, int64_t vocab, const TokenRules& r) {
    Support all;
    all.reserve(static_cast<size_t>(vocab));
    bool bad = false, any_finite = false;
    for_segments(vocab, r.banned, [&](int64_t b, int64_t e) {
        for (int64_t v = b; v < e && !bad; ++v) {
            const float logit = load(row, v);
            bad = !usable(logit);
            any_finite = any_finite || logit > kNegInf;
            all.emplace_back(v, r.temperature > 0 ? static_cast<double>(logit) / r.temperature
                                                  : static_cast<double>(logit));
        }
    });
    if (bad || !any_finite) return {};
    const bool nucleus = r.top_p && *r.top_p < 1.0;
    if (r.top_k && r.top_k_first) keep_top_k(all, *r.top_k);
    if (nucleus && !all.empty()) keep_nucleus(all, *r.top_p);
    if (r.top_k && !r.top_k_first) keep_top_k(all, *r.top_k);
    std::sort(all.begin(), all.end());  // by token: draws walk the vocabulary in order
    return all;
}

// Whether the row's confidence is sum p log p (minus the entropy: higher = more certain).
bool entropy_confidence(Algorithm a) { return a == Algorithm::Entropy || a == Algorithm::EntropyBounded; }


// LLaDA (block schedule): token by argmax or Gumbel-max in float64; confidence from the
// softmax of the untempered logits without the unranked ids (reference chained-assignment quirk).
template <class T>
RowScore score_block(const T* row, int64_t vocab, const TokenRules& r, const std::vector<int64_t>& skip,
                     const CounterRng& rng, uint64_t step, uint64_t position) {
    // Ranked over Z's members (no banned, no unranked); the same read of the row gives the
    // confidence softmax sum z.
    const RowPass ranked = row_pass(row, vocab, skip, 1.0f, false);
    Top2 choice = ranked.top;
    for (int64_t id : r.unranked)
        if (id < vocab) choice.offer(load(row, id), id);
    RowScore out;
    if (r.temperature > 0) {
        double best = -std::numeric_limits<double>::infinity();
        for_segments(vocab, r.banned, [&](int64_t b, int64_t e) {
            for (int64_t v = b; v < e; ++v) {
                const double u = rng.uniform(Stream::TokenNoise, step, position, static_cast<uint64_t>(v));
                const double key = static_cast<double>(load(row, v)) - r.temperature * std::log(-std::log(u));
                if (key > best) {
                    best = key;
                    out.token = v;
                }
            }
        });
    } else {
        out.token = choice.i1;
    }
    if (out.token < 0 || std::isnan(choice.v1)) return RowScore{};  // unscorable row: token -1, reported by the caller
    // The same rule as the other paths, before `random` ignores the values: ranked.z is NaN
    // when a ranked logit is NaN or +inf; unranked ids are read one by one.
    if (std::isnan(ranked.z)) return RowScore{};
    for (int64_t id : r.unranked)
        if (id < vocab && !usable(load(row, id))) return RowScore{};
    if (r.algorithm == Algorithm::Random) {
        out.confidence = rng.uniform(Stream::RandomConfidence, step, position, 0);
        return out;
    }
    if (contains(r.unranked, out.token)) return out;  // confidence 0
    const double z = ranked.z;
    if (!(z > 0.0) || !std::isfinite(z)) return RowScore{};  // unscorable row: token -1, reported by the caller
    out.confidence = kernels::exp_nonpositive(load(row, out.token) - ranked.top.v1) / z;
    return out;
}

// Dream (timestep schedule) and SDAR token sampler and their confidences.
template <class T>
RowScore score_timestep(const T* row, int64_t vocab, const TokenRules& r, const CounterRng& rng, uint64_t step,
                        uint64_t position) {
    const bool draw = r.temperature > 0;
    const double u = draw ? rng.uniform(Stream::TokenDraw, step, position, 0) : 0.0;
    RowScore out;
    if ((r.top_p && *r.top_p < 1.0) || r.top_k) {
        const auto support = filtered_support(row, vocab, r);
        if (support.empty()) return RowScore{};  // unscorable row: token -1, reported by the caller
        double m = -std::numeric_limits<double>::infinity();
        for (auto& t : support) m = std::max(m, t.second);
        if (!std::isfinite(m)) return RowScore{};  // unscorable row: token -1, reported by the caller
        std::vector<double> p(support.size());
        double z = 0.0;
        for (size_t j = 0; j < support.size(); ++j) z += (p[j] = std::exp(support[j].second - m));
        double p1 = 0.0, p2 = 0.0, neg_entropy = 0.0;
        size_t best = 0;
        for (size_t j = 0; j < support.size(); ++j) {
            p[j] /= z;
            // Dream adds 1e-10 inside the log; SDAR's entropy drops p = 0 terms and is exact
            if (r.algorithm == Algorithm::Entropy)
                neg_entropy += p[j] * std::log(p[j] + 1e-10);
            else if (p[j] > 0.0)
                neg_entropy += p[j] * std::log(p[j]);
            if (p[j] > p1) {
                p2 = p1;
                p1 = p[j];
                best = j;
            } else {
                p2 = std::max(p2, p[j]);
            }
        }
        size_t pick = best;
        if (draw) {
            double target = u, acc = 0.0;
            for (size_t j = 0; j < support.size(); ++j) {
                if (p[j] <= 0.0) continue;
                pick = j;
                acc += p[j];
                if (acc > target) break;
            }
        }
        out.token = support[pick].first;
        out.confidence = r.algorithm == Algorithm::TopkMargin ? p1 - p2
                         : entropy_confidence(r.algorithm)    ? neg_entropy
                                                              : p[pick];
        return out;
    }
    const float scale = draw ? static_cast<float>(1.0 / r.temperature) : 1.0f;
    const bool with_x = entropy_confidence(r.algorithm);
    const RowPass pass = row_pass(row, vocab, r.banned, scale, with_x);
    const Top2& t = pass.top;
    if (t.i1 < 0 || std::isnan(t.v1)) return RowScore{};  // unscorable row: token -1, reported by the caller
    double z = pass.z, zx = pass.zx;
    std::vector<ExpChunk> chunks;
    if (draw)  // the inverse-CDF draw walks chunk sums; z then comes from the same sums
        exp_sums(row, vocab, r.banned, t.v1, scale, with_x, z, zx, &chunks);
    if (!(z > 0.0) || !std::isfinite(z)) return RowScore{};  // unscorable row: token -1, reported by the caller
    out.token = draw ? draw_from_chunks(row, chunks, z, t.v1, scale, u) : t.i1;
    if (out.token < 0) return RowScore{};  // unscorable row: token -1, reported by the caller
    switch (r.algorithm) {
        case Algorithm::TopkMargin:
            out.confidence = (1.0 - kernels::exp_nonpositive((t.v2 - t.v1) * scale)) / z;
            break;
        case Algorithm::Entropy:
        case Algorithm::EntropyBounded:
            out.confidence = zx / z - std::log(z);  // sum p log p; the reference's +1e-10 moves it by < V * 1e-10
            break;
        default:
            out.confidence = kernels::exp_nonpositive((load(row, out.token) - t.v1) * scale) / z;
    }
    return out;
}

template <class T>
RowScore score_row(const T* row, int64_t vocab, const TokenRules& r, const std::vector<int64_t>& skip,
                   const CounterRng& rng, uint64_t step, uint64_t position) {
    const RowScore out = schedule_of(r.algorithm) == Schedule::Block
                             ? score_block(row, vocab, r, skip, rng, step, position)
                             : score_timestep(row, vocab, r, rng, step, position);
    // A NaN confidence would sort anywhere among the candidates: never commit on one.
    return std::isnan(out.confidence) ? RowScore{} : out;
}

// logits = uncond + (cfg + 1) * (cond - uncond), in float32 like the reference.
template <class T>
void combine_cfg(const T* cond, const T* uncond, int64_t vocab, float scale, float* out) {
    for (int64_t v = 0; v < vocab; ++v) {
        const float u = load(uncond, v);
        out[v] = u + scale * (load(cond, v) - u);
    }
}

// One slice of rows, everything inlined; on x86-64 GCC also builds an AVX2+FMA clone picked
// at load time (the portable build stays baseline: no -march flag). Not in the sanitizer build:
// instrumented and flattened, this one function took GCC many minutes; the clone is the same code.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(UNMASK_SANITIZE)
#define UNMASK_SIMD_CLONES __attribute__((flatten, target_clones("avx2,fma", "default")))
#else
#define UNMASK_SIMD_CLONES
#endif

template <class T>
UNMASK_SIMD_CLONES bool score_slice(const LogitsView& view, int64_t begin, int64_t end, double cfg_scale,
                                    const TokenRules& rules, const std::vector<int64_t>& skip, const CounterRng& rng,
                                    uint64_t step, const int64_t* positions, RowScore* out) {
    // Returns false on a row that cannot be scored; the error is raised by the caller
    // (no exception crosses a function with target clones).
    const T* base = static_cast<const T*>(view.data);
    const int64_t V = view.vocab;
    std::vector<float> mixed;
    for (int64_t k = begin; k < end; ++k) {
        const int64_t row = view.row_index ? view.row_index[k] : k;
        const T* cond = base + row * V;
        const auto pos = static_cast<uint64_t>(positions[k]);
        if (view.batch == 2) {
            mixed.resize(static_cast<size_t>(V));
            combine_cfg(cond, cond + view.rows * V, V, static_cast<float>(cfg_scale + 1.0), mixed.data());
            out[k] = score_row(mixed.data(), V, rules, skip, rng, step, pos);
        } else {
            out[k] = score_row(cond, V, rules, skip, rng, step, pos);
        }
        if (out[k].token < 0) return false;
    }
    return true;
}

template <class T>
void score_rows_typed(const LogitsView& view, int64_t count, double cfg_scale, const TokenRules& rules,
                      const CounterRng& rng, uint64_t step, const int64_t* positions, RowScore* out, int threads) {
    std::vector<int64_t> skip(rules.banned);
    skip.insert(skip.end(), rules.unranked.begin(), rules.unranked.end());
    std::sort(skip.begin(), skip.end());
    parallel_for(count, threads, [&](int64_t begin, int64_t end) {
        if (!score_slice<T>(view, begin, end, cfg_scale, rules, skip, rng, step, positions, out))
            throw InputError("logits row cannot be scored: NaN or infinite values, or every token excluded");
    });
}

}  // namespace

TokenRules token_rules(const DecodeParams& p) {
    check_params(p);  // rules are built only from checked params: negative ids would index rows
    TokenRules r;
    r.algorithm = p.algorithm;
    r.temperature = p.temperature;
    r.top_k = p.top_k;
    r.top_p = p.top_p;
    if (schedule_of(p.algorithm) == Schedule::Sdar) {
        r.top_k_first = true;
        // SDAR's greedy path takes the raw softmax: its filters apply only when sampling. LLaDA2's
        // filters at T = 0 too (argmax and confidence under the renormalised filtered distribution).
        if (p.temperature <= 0.0 && p.algorithm != Algorithm::Llada2) r.top_k.reset(), r.top_p.reset();
    }
    r.banned.push_back(p.mask_id);
    if (p.logits_eos_inf && p.eos_id) r.banned.push_back(*p.eos_id);
    // LLaDA's `logits_with_noise[:, :, eos] = logits[:, :, eot] = -inf`: at T = 0 both names are
    // the same tensor, so EOS and EoT leave the confidence softmax; at T > 0 only EoT does.
    if (p.confidence_eos_eot_inf && schedule_of(p.algorithm) == Schedule::Block) {
        if (p.eos_id && p.temperature == 0.0) r.unranked.push_back(*p.eos_id);
        if (p.eot_id) r.unranked.push_back(*p.eot_id);
    }
    std::sort(r.banned.begin(), r.banned.end());
    r.banned.erase(std::unique(r.banned.begin(), r.banned.end()), r.banned.end());
    std::sort(r.unranked.begin(), r.unranked.end());
    r.unranked.erase(std::unique(r.unranked.begin(), r.unranked.end()), r.unranked.end());
    r.unranked.erase(std::remove_if(r.unranked.begin(), r.unranked.end(),
                                    [&](int64_t id) { return contains(r.banned, id); }),
                     r.unranked.end());
    return r;
}

void score_rows(const LogitsView& view, int64_t count, double cfg_scale, const TokenRules& rules,
                const CounterRng& rng, uint64_t step, const int64_t* positions, RowScore* out, int threads) {
    if (view.vocab < 1) throw InputError("logits have an empty vocabulary axis");
    if (view.vocab > std::numeric_limits<int32_t>::max())  // the row pass keeps int32 indices
        throw InputError("logits have a vocabulary of " + std::to_string(view.vocab) + " ids; at most 2^31 - 1");
    if (view.dtype == DType::F32)
        score_rows_typed<float>(view, count, cfg_scale, rules, rng, step, positions, out, threads);
    else
        score_rows_typed<uint16_t>(view, count, cfg_scale, rules, rng, step, positions, out, threads);
}

std::vector<float> dream_timesteps(int64_t steps, double eps) {
    // torch.linspace(1, eps, steps + 1) on CPU: float32 step, each value one fused multiply-add,
    // from the start for the first half and from the end for the second.
    const int64_t n = steps + 1;
    const float start = 1.0f, end = static_cast<float>(eps);
    const float step = n > 1 ? (end - start) / static_cast<float>(n - 1) : 0.0f;
    std::vector<float> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        t[static_cast<size_t>(i)] = i < n / 2 ? std::fma(step, static_cast<float>(i), start)
                                              : std::fma(-step, static_cast<float>(n - 1 - i), end);
    return t;
}

}  // namespace unmask
