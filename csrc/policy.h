// The small stateless policies of one step: which positions it scores, how many it commits and
// in which order, and which positions Dream's `origin` reveals. Each switches on an enum; the
// decoder's loop calls step_targets before the forward pass and choose_commits after it.
#pragma once
#include <cstdint>
#include <vector>

#include "params.h"
#include "rng.h"
#include "scoring.h"

namespace unmask {

// Where a block's schedule stands at one step: what the step policies read besides the params.
struct StepContext {
    const std::vector<float>& timesteps;  // Dream's timestep schedule (empty under LLaDA's)
    int64_t step, steps;                  // step within the block, steps per block
    int64_t block_masks;                  // masks at the block's start (LLaDA's per-step count)
    const CounterRng& rng;
    uint64_t global_step;                 // keys the step's random draws
};

// LLaDA get_num_transfer_tokens: M // S per step, the first M % S steps one more.
int64_t block_transfer_count(int64_t block_masks, int64_t steps, int64_t step);

// Dream: int(M * (1 - s / t)) in float32 (last step: all); t = timesteps[step], s = timesteps[step + 1].
int64_t timestep_transfer_count(int64_t masked, const std::vector<float>& timesteps, int64_t step);

// Dream `origin`: position revealed with probability 1 - s / t (last step: 1).
bool origin_reveals(const std::vector<float>& timesteps, int64_t step, const CounterRng& rng, uint64_t global_step,
                    int64_t position);

// Fast-dLLM rules on confidences sorted descending (rank 1 always passes).
int64_t threshold_count(const std::vector<double>& sorted_confidence, double threshold);
int64_t factor_count(const std::vector<double>& sorted_confidence, double factor);

// Positions committed this step: the schedule's count, or the parallel rule's (never fewer than
// needed to finish the block within its remaining steps); at least 1.
int64_t transfer_count(const DecodeParams& p, const std::vector<double>& sorted_confidence, int64_t block_masks,
                       int64_t masked, const std::vector<float>& timesteps, int64_t step, int64_t steps);

// SDAR's count (the reference's select_transfer): the step's scheduled count n from the block
// length, clamped to the masked positions; `low_confidence_dynamic` and LLaDA2's sampler raise
// it to the positions with confidence > threshold, `entropy_bounded` to the longest
// ascending-entropy prefix whose running sum stays below the budget (confidences there are
// sum p log p = minus the entropy).
int64_t sdar_transfer_count(const DecodeParams& p, const std::vector<double>& sorted_confidence, int64_t step,
                            int64_t steps);

// Candidate order for committing: confidence descending, ties lowest position; with Dream's
// alg_temp > 0 a Gumbel-top-k draw (= sampling without replacement from softmax(conf / alg_temp)).
std::vector<size_t> commit_order(const DecodeParams& p, const std::vector<RowScore>& scores,
                                 const std::vector<int64_t>& positions, const CounterRng& rng, uint64_t global_step);

// The positions a step scores, from the block's masked ones: Dream `origin` only those it reveals
// this step. Empty = the step would commit nothing, so its forward pass (the same as the next
// step's) is skipped.
std::vector<int64_t> step_targets(const DecodeParams& p, std::vector<int64_t> masked, const StepContext& s);

// The targets the step commits, as ascending indices into `scores` (scores[k] is targets[k]):
// `origin` commits every target it revealed, the others the transfer count in commit order.
std::vector<size_t> choose_commits(const DecodeParams& p, const std::vector<RowScore>& scores,
                                   const std::vector<int64_t>& targets, const StepContext& s);

}  // namespace unmask
