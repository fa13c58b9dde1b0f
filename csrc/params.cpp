// The C++ boundary's check of DecodeParams: every field, so that nothing that reaches the
// decoder or the scorer can index out of bounds, overflow a size or turn a row into NaN.
#include "params.h"

#include <cmath>
#include <sstream>
#include <string>
#include <thread>

#include "errors.h"

namespace unmask {
namespace {

template <class T>
std::string str(T value) {
    std::ostringstream out;
    out.precision(17);
    out << value;
    return out.str();
}

void require(bool ok, const std::string& message) {
    if (!ok) throw ConfigError(message);
}

void check_sizes(const DecodeParams& p) {
    const std::string cap = str(kMaxLength);
    require(p.gen_length >= 1 && p.gen_length <= kMaxLength,
            "gen_length must be in [1, " + cap + "], got " + str(p.gen_length));
    require(p.block_length >= 1 && p.block_length <= p.gen_length && p.gen_length % p.block_length == 0,
            "block_length must divide gen_length " + str(p.gen_length) + ", got " + str(p.block_length));
    const int64_t blocks = p.gen_length / p.block_length;
    require(p.steps >= 1 && p.steps <= kMaxLength && p.steps % blocks == 0,
            "steps must be a multiple of the number of blocks (" + str(blocks) + ") in [1, " + cap + "], got " +
                str(p.steps));
    require(p.threads >= 0 && p.threads <= max_threads(),
            "threads must be in [0, " + str(max_threads()) + "] (0 = one per hardware thread), got " +
                str(p.threads));
}

void check_sampling(const DecodeParams& p) {
    require(!(p.threshold && p.factor), "set only one of threshold and factor");
    if (p.algorithm == Algorithm::EntropyBounded)  // its threshold is an entropy budget in nats
        require(!p.threshold || (*p.threshold > 0 && std::isfinite(*p.threshold)),
                "entropy_bounded's threshold must be a finite number > 0, got " + str(p.threshold.value_or(0)));
    else
        require(!p.threshold || (*p.threshold > 0 && *p.threshold <= 1),
                "threshold must be in (0, 1], got " + str(p.threshold.value_or(0)));
    require(!p.factor || (*p.factor > 0 && std::isfinite(*p.factor)),
            "factor must be a finite number > 0, got " + str(p.factor.value_or(0)));
    require(p.temperature == 0 || (p.temperature >= kMinTemperature && std::isfinite(p.temperature)),
            "temperature must be 0 (greedy) or a finite number >= " + str(kMinTemperature) + ", got " +
                str(p.temperature));
    require(!p.top_k || *p.top_k >= 1, "top_k must be >= 1, got " + str(p.top_k.value_or(0)));
    require(!p.top_p || (*p.top_p > 0 && *p.top_p <= 1), "top_p must be in (0, 1], got " + str(p.top_p.value_or(0)));
    require(p.alg_temp >= 0 && std::isfinite(p.alg_temp), "alg_temp must be a finite number >= 0, got " + str(p.alg_temp));
    require(p.eps > 0 && p.eps < 1, "eps must be in (0, 1), got " + str(p.eps));
    require(p.cfg_scale >= 0 && std::isfinite(p.cfg_scale),
            "cfg_scale must be a finite number >= 0, got " + str(p.cfg_scale));
}

void check_ids(const DecodeParams& p) {
    require(p.mask_id >= 0, "mask_id must be set (the model's [MASK] token id), got " + str(p.mask_id));
    require(!p.eos_id || *p.eos_id >= 0, "eos_id must be >= 0, got " + str(p.eos_id.value_or(0)));
    require(!p.eot_id || *p.eot_id >= 0, "eot_id must be >= 0, got " + str(p.eot_id.value_or(0)));
    require(!p.logits_eos_inf || p.eos_id, "logits_eos_inf needs eos_id");
    require(!p.confidence_eos_eot_inf || p.eos_id || p.eot_id, "confidence_eos_eot_inf needs eos_id or eot_id");
}

// The block-diffusion (SDAR) algorithms and the exact block cache go together.
void check_schedule(const DecodeParams& p) {
    const bool sdar = schedule_of(p.algorithm) == Schedule::Sdar;
    require(!sdar || p.steps / (p.gen_length / p.block_length) <= p.block_length,
            "SDAR's schedule needs steps per block <= block_length " + str(p.block_length));
    require(!((p.algorithm == Algorithm::LowConfidenceDynamic || p.algorithm == Algorithm::EntropyBounded ||
               p.algorithm == Algorithm::Llada2) && !p.threshold),
            "low_confidence_dynamic, entropy_bounded and llada2 need a threshold");
    require(p.minimal_topk >= 1 && p.minimal_topk <= p.gen_length,
            "minimal_topk must be in [1, gen_length " + str(p.gen_length) + "], got " + str(p.minimal_topk));
    require(p.minimal_topk == 1 || p.algorithm == Algorithm::Llada2, "minimal_topk applies only to llada2");
    require(!(sdar && p.factor), "factor does not apply to SDAR's algorithms");
    require(p.cache != CacheMode::Block || sdar, "cache block needs an SDAR algorithm (block layout)");
}

}  // namespace

int max_threads() {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > static_cast<unsigned>(kMinMaxThreads) ? static_cast<int>(hw) : kMinMaxThreads;
}

void check_params(const DecodeParams& p) {
    check_ids(p);
    check_sizes(p);
    check_sampling(p);
    check_schedule(p);
}

}  // namespace unmask
