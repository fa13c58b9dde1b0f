// The sampler's settings: one struct, defaults here, enums instead of strings.
// runtime/decoding.py fills it from GenerationConfig; nothing past the bindings sees a string.
#pragma once
#include <cstdint>
#include <optional>

namespace unmask {

// Which positions to commit. The first two follow LLaDA's block schedule, the next four
// Dream's timestep schedule, the last five the block-diffusion schedule: SDAR's four and
// LLaDA2's sampler (docs/models.md, sampler rules).
enum class Algorithm {
    LowConfidence, Random,
    Origin, MaskgitPlus, TopkMargin, Entropy,
    Sequential, LowConfidenceStatic, LowConfidenceDynamic, EntropyBounded,
    Llada2,
};
// Block: LLaDA's blocks laid from the prompt end, count from the masks at block start.
// Timestep: Dream's. Sdar: blocks aligned to absolute position 0 (the first holds the prompt's
// tail), count from the block length (SDAR's algorithms and LLaDA2's).
enum class Schedule { Block, Timestep, Sdar };
// Block: exact cache of block-causal models: prefill the complete prompt blocks once, store
// each finished block once, never refresh.
enum class CacheMode { None, Prefix, Dual, Block };

inline Schedule schedule_of(Algorithm a) {
    switch (a) {
        case Algorithm::LowConfidence:
        case Algorithm::Random:
            return Schedule::Block;
        case Algorithm::Sequential:
        case Algorithm::LowConfidenceStatic:
        case Algorithm::LowConfidenceDynamic:
        case Algorithm::EntropyBounded:
        case Algorithm::Llada2:
            return Schedule::Sdar;
        default:
            return Schedule::Timestep;
    }
}

struct DecodeParams {
    int64_t gen_length = 128;             // tokens in the generated region
    int64_t steps = 128;                  // forward-pass budget over the whole generation
    int64_t block_length = 128;           // semi-autoregressive block (gen_length = one block)
    Algorithm algorithm = Algorithm::LowConfidence;
    std::optional<double> threshold;      // Fast-dLLM: commit every confidence >= threshold; SDAR dynamic
                                          // and LLaDA2: every confidence > threshold; SDAR entropy_bounded:
                                          // the entropy budget
    std::optional<double> factor;         // Fast-dLLM: commit rank n while conf >= 1 - factor/(n+1)
    int64_t minimal_topk = 1;             // LLaDA2: steps per block at most gen_length / minimal_topk
    double temperature = 0.0;             // 0 = argmax
    std::optional<int64_t> top_k;         // Dream token filter
    std::optional<double> top_p;          // Dream nucleus filter
    double alg_temp = 0.0;                // Dream: > 0 draws positions from softmax(conf / alg_temp)
    double eps = 1e-3;                    // Dream: last timestep
    double cfg_scale = 0.0;               // classifier-free guidance; > 0 doubles the batch
    bool logits_eos_inf = false;          // forbid EOS as a token
    bool confidence_eos_eot_inf = false;  // LLaDA: EOS/EoT never win a position (reference quirk kept)
    bool early_stop = true;               // stop once a finished block holds EOS (SDAR: or EoT; LLaDA2:
                                          // once the first EOS has no mask before it, mid-block)
    uint64_t seed = 0;                    // counter-based RNG key: same seed, same tokens, any thread count
    CacheMode cache = CacheMode::None;    // key/value reuse policy of next_request()
    int64_t mask_id = -1;                 // required
    std::optional<int64_t> eos_id;
    std::optional<int64_t> eot_id;
    bool shift_logits = false;            // Dream: position i reads row i-1
    int threads = 0;                      // scoring threads; 0 = hardware concurrency
};

// Bounds of the core itself; the Python side narrows them by what the model allows.
constexpr int64_t kMaxLength = int64_t{1} << 17;  // gen_length and steps: 131,072 (a 128k context)
constexpr double kMinTemperature = 1e-6;          // a positive temperature below it only overflows 1/T
constexpr int kMinMaxThreads = 256;               // threads cap on machines with fewer hardware threads
int max_threads();                                // max(kMinMaxThreads, hardware concurrency)

// Throws ConfigError naming the first parameter out of its range (every field is checked:
// the struct is reachable from Python without GenerationConfig.validate()).
void check_params(const DecodeParams& p);

}  // namespace unmask
