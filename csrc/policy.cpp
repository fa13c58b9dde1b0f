#include "policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace unmask {

int64_t block_transfer_count(int64_t block_masks, int64_t steps, int64_t step) {
    return block_masks / steps + (step < block_masks % steps ? 1 : 0);
}

int64_t timestep_transfer_count(int64_t masked, const std::vector<float>& timesteps, int64_t step) {
    const auto last = static_cast<int64_t>(timesteps.size()) - 2;
    if (step >= last) return masked;
    const float t = timesteps[static_cast<size_t>(step)], s = timesteps[static_cast<size_t>(step + 1)];
    const float fraction = 1.0f - s / t;
    return static_cast<int64_t>(static_cast<float>(masked) * fraction);
}

bool origin_reveals(const std::vector<float>& timesteps, int64_t step, const CounterRng& rng, uint64_t global_step,
                    int64_t position) {
    const auto last = static_cast<int64_t>(timesteps.size()) - 2;
    if (step >= last) return true;
    const float t = timesteps[static_cast<size_t>(step)], s = timesteps[static_cast<size_t>(step + 1)];
    const float p = 1.0f - s / t;
    return rng.uniform(Stream::Reveal, global_step, static_cast<uint64_t>(position), 0) < static_cast<double>(p);
}

int64_t threshold_count(const std::vector<double>& c, double threshold) {
    int64_t n = c.empty() ? 0 : 1;
    while (n < static_cast<int64_t>(c.size()) && c[static_cast<size_t>(n)] >= threshold) ++n;
    return n;
}

int64_t factor_count(const std::vector<double>& c, double factor) {
    // Fast-dLLM get_transfer_index_dynamic: rank n (1-based) passes when conf >= 1 - factor / (n + 1);
    // commit up to the first failing rank. Its loop also commits everything when only the
    // last rank fails (`top_i == len(threshs) - 1`); kept so token streams match.
    const auto count = static_cast<int64_t>(c.size());
    if (count <= 1) return count;
    int64_t i = 1;
    while (i < count && c[static_cast<size_t>(i)] >= 1.0 - factor / static_cast<double>(i + 2)) ++i;
    return (i == count || i == count - 1) ? count : i;
}

int64_t transfer_count(const DecodeParams& p, const std::vector<double>& sorted_confidence, int64_t block_masks,
                       int64_t masked, const std::vector<float>& timesteps, int64_t step, int64_t steps) {
    int64_t n;
    if (p.threshold || p.factor) {
        n = p.threshold ? threshold_count(sorted_confidence, *p.threshold)
                        : factor_count(sorted_confidence, *p.factor);
        // `steps` only bounds the work: commit enough to finish the block in its remaining steps.
        const int64_t remaining_steps = std::max<int64_t>(1, steps - step);
        n = std::max(n, (masked + remaining_steps - 1) / remaining_steps);
    } else if (schedule_of(p.algorithm) == Schedule::Block) {
        n = block_transfer_count(block_masks, steps, step);
    } else {
        n = timestep_transfer_count(masked, timesteps, step);  // steps with 0 are skipped before the forward
    }
    return std::min(masked, std::max(n, int64_t{1}));
}

int64_t sdar_transfer_count(const DecodeParams& p, const std::vector<double>& c, int64_t step, int64_t steps) {
    const auto masked = static_cast<int64_t>(c.size());
    const int64_t n = std::min(masked, block_transfer_count(p.block_length, steps, step));
    switch (p.algorithm) {
        case Algorithm::LowConfidenceDynamic:
        case Algorithm::Llada2: {
            int64_t high = 0;  // strict >, as both references
            while (high < masked && c[static_cast<size_t>(high)] > *p.threshold) ++high;
            return high >= n ? high : n;
        }
        case Algorithm::EntropyBounded: {
            int64_t budget = 0;  // searchsorted(cumsum(entropy ascending), bound, right=False)
            double sum = 0.0;
            while (budget < masked && (sum += -c[static_cast<size_t>(budget)]) < *p.threshold) ++budget;
            return std::min(masked, std::max({n, budget, int64_t{1}}));
        }
        default:
            return n;
    }
}

std::vector<size_t> commit_order(const DecodeParams& p, const std::vector<RowScore>& scores,
                                 const std::vector<int64_t>& positions, const CounterRng& rng, uint64_t global_step) {
    std::vector<double> key(scores.size());
    const bool draw = p.alg_temp > 0 && schedule_of(p.algorithm) == Schedule::Timestep && !p.threshold && !p.factor;
    for (size_t k = 0; k < scores.size(); ++k) {
        key[k] = scores[k].confidence;
        if (draw) {
            const double u = rng.uniform(Stream::PositionDraw, global_step, static_cast<uint64_t>(positions[k]), 0);
            key[k] = key[k] / p.alg_temp - std::log(-std::log(u));
        }
    }
    std::vector<size_t> order(scores.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return key[a] > key[b] || (key[a] == key[b] && positions[a] < positions[b]);
    });
    return order;
}

std::vector<int64_t> step_targets(const DecodeParams& p, std::vector<int64_t> masked, const StepContext& s) {
    if (schedule_of(p.algorithm) != Schedule::Timestep) return masked;
    if (p.algorithm == Algorithm::Origin) {
        std::vector<int64_t> revealed;
        for (int64_t position : masked)
            if (origin_reveals(s.timesteps, s.step, s.rng, s.global_step, position)) revealed.push_back(position);
        return revealed;
    }
    const bool fixed_count = !p.threshold && !p.factor;
    if (fixed_count && timestep_transfer_count(static_cast<int64_t>(masked.size()), s.timesteps, s.step) == 0)
        return {};
    return masked;
}

std::vector<size_t> choose_commits(const DecodeParams& p, const std::vector<RowScore>& scores,
                                   const std::vector<int64_t>& targets, const StepContext& s) {
    std::vector<size_t> chosen;
    if (p.algorithm == Algorithm::Origin) {
        for (size_t k = 0; k < scores.size(); ++k) chosen.push_back(k);
        return chosen;
    }
    std::vector<double> sorted(scores.size());
    for (size_t k = 0; k < scores.size(); ++k) sorted[k] = scores[k].confidence;
    std::sort(sorted.begin(), sorted.end(), [](double a, double b) { return a > b; });
    const auto count = static_cast<int64_t>(scores.size());
    const bool sdar = schedule_of(p.algorithm) == Schedule::Sdar;
    const int64_t n = sdar ? sdar_transfer_count(p, sorted, s.step, s.steps)
                           : transfer_count(p, sorted, s.block_masks, count, s.timesteps, s.step, s.steps);
    std::vector<size_t> order(scores.size());
    std::iota(order.begin(), order.end(), size_t{0});  // `sequential`: left to right (targets ascend)
    if (p.algorithm != Algorithm::Sequential) order = commit_order(p, scores, targets, s.rng, s.global_step);
    chosen.assign(order.begin(), order.begin() + n);
    std::sort(chosen.begin(), chosen.end());
    return chosen;
}

}  // namespace unmask
