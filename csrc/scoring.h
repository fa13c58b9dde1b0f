// Scoring: one row of logits -> (token, confidence), per docs/models.md (sampler rules).
// A row is float32 or float16 (IEEE half bits); rows are scored in parallel.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "params.h"
#include "rng.h"

namespace unmask {

enum class DType { F32, F16 };

// How a row becomes a token and a confidence; fixed for one decoder.
struct TokenRules {
    Algorithm algorithm = Algorithm::LowConfidence;
    double temperature = 0.0;
    std::optional<int64_t> top_k;
    std::optional<double> top_p;
    bool top_k_first = false;       // SDAR filters top-k then top-p; Dream top-p then top-k
    std::vector<int64_t> banned;    // never chosen, out of every softmax (mask id; EOS under logits_eos_inf)
    std::vector<int64_t> unranked;  // LLaDA confidence_eos_eot_inf: out of the confidence softmax; token -> confidence 0
};

// Checks every parameter first (check_params: ConfigError), so both the decoder and score() are covered.
TokenRules token_rules(const DecodeParams& p);

struct RowScore {
    int64_t token = -1;
    double confidence = 0.0;
};

// logits [batch, rows, vocab] (contiguous); row k of the request reads logits row row_index[k]
// (or k when row_index is null); batch 2 = classifier-free guidance, combined before scoring.
struct LogitsView {
    const void* data = nullptr;
    DType dtype = DType::F32;
    int64_t batch = 1, rows = 0, vocab = 0;
    const int64_t* row_index = nullptr;
};

// Scores `count` rows; positions[k] keys the random draws of row k. Runs on `threads` threads
// (0 = hardware concurrency); the result does not depend on the thread count.
void score_rows(const LogitsView& logits, int64_t count, double cfg_scale, const TokenRules& rules,
                const CounterRng& rng, uint64_t step, const int64_t* positions, RowScore* out, int threads);

// The Dream timesteps linspace(1, eps, steps + 1) with torch's float32 arithmetic.
std::vector<float> dream_timesteps(int64_t steps, double eps);

}  // namespace unmask
