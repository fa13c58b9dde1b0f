#include "decoder.h"

#include <algorithm>
#include <string>

#include "errors.h"
#include "policy.h"

namespace unmask {

Decoder::Decoder(const DecodeParams& params, std::vector<int64_t> prompt, const std::vector<int64_t>& fixed,
                 bool infill)
    : params_(params), rng_{params.seed}, rules_(token_rules(params)) {  // token_rules checks params
    if (prompt.empty()) throw InputError("prompt_ids is empty: give at least one token (e.g. BOS)");
    prompt_length_ = static_cast<int64_t>(prompt.size());
    const int64_t gen = params_.gen_length, mask = params_.mask_id;
    int64_t first_hole = prompt_length_;
    for (int64_t i = 0; i < prompt_length_; ++i) {
        const int64_t id = prompt[static_cast<size_t>(i)];
        if (id < 0) throw InputError("prompt_ids[" + std::to_string(i) + "] = " + std::to_string(id) + " is negative");
        if (id == mask) {
            if (!infill)
                throw InputError("prompt_ids[" + std::to_string(i) + "] is the mask id " + std::to_string(mask) +
                                 "; pass infill=True to fill masked prompt positions");
            first_hole = std::min(first_hole, i);
        }
    }
    if (!fixed.empty() && static_cast<int64_t>(fixed.size()) != gen)
        throw InputError("template has " + std::to_string(fixed.size()) + " ids, expected gen_length = " +
                         std::to_string(gen));
    x_ = std::move(prompt);
    x_.resize(static_cast<size_t>(prompt_length_ + gen), mask);
    for (int64_t i = 0; i < static_cast<int64_t>(fixed.size()); ++i) {
        const int64_t id = fixed[static_cast<size_t>(i)];
        if (id < 0) throw InputError("template[" + std::to_string(i) + "] = " + std::to_string(id) + " is negative");
        x_[static_cast<size_t>(prompt_length_ + i)] = id;
        if (id != mask) last_pinned_ = prompt_length_ + i;
    }
    hole_.resize(x_.size());
    for (size_t i = 0; i < x_.size(); ++i) hole_[i] = x_[i] == mask;

    const int64_t bl = params_.block_length, nblocks = gen / bl;
    steps_per_block_ = params_.steps / nblocks;
    // LLaDA2: steps = min(steps, gen_length // minimal_topk), from the whole generation's length
    if (params_.algorithm == Algorithm::Llada2)
        steps_per_block_ = std::min(steps_per_block_, gen / params_.minimal_topk);
    if (schedule_of(params_.algorithm) == Schedule::Sdar) {
        lay_out_sdar(first_hole);
    } else {
        for (int64_t b = 0; b < nblocks; ++b) {
            const int64_t gs = prompt_length_ + b * bl;
            blocks_.push_back({b == 0 ? first_hole : gs, gs + bl, gs, gs + bl});
        }
    }
    if (schedule_of(params_.algorithm) == Schedule::Timestep)
        timesteps_ = dream_timesteps(steps_per_block_, params_.eps);
    settle(nullptr);
}

// SDAR: block k covers absolute positions [k B, (k + 1) B); the canvas grows to the end of the
// block holding position P + gen_length - 1, and the first decoded block is the one holding the
// first hole (the prompt's tail rides along in it). Every block before is prefilled.
void Decoder::lay_out_sdar(int64_t first_hole) {
    const int64_t bl = params_.block_length;
    const int64_t total = (length() + bl - 1) / bl * bl;
    x_.resize(static_cast<size_t>(total), params_.mask_id);
    hole_.resize(x_.size(), 1);
    for (int64_t start = first_hole / bl * bl; start < total; start += bl) {
        const int64_t gs = std::min(std::max(prompt_length_, start), start + bl);
        blocks_.push_back({start, start + bl, gs, start + bl});
    }
    if (params_.cache == CacheMode::Block && blocks_.front().start > 0) pending_ = StepKind::Prefill;
}

bool Decoder::stops(int64_t token) const {
    if (params_.eos_id && token == *params_.eos_id) return true;
    // SDAR stops on every id of its stop list: <|endoftext|> and <|im_end|>; LLaDA2 on EOS only
    return schedule_of(params_.algorithm) == Schedule::Sdar && params_.algorithm != Algorithm::Llada2 &&
           params_.eot_id && token == *params_.eot_id;
}

std::vector<int64_t> Decoder::masked_in_block() const {
    std::vector<int64_t> out;
    const Block& b = blocks_[static_cast<size_t>(block_)];
    for (int64_t p = b.start; p < b.end; ++p)
        if (x_[static_cast<size_t>(p)] == params_.mask_id && hole_[static_cast<size_t>(p)]) out.push_back(p);
    return out;
}

void Decoder::finish_block(StepEvent* event) {
    const Block& b = blocks_[static_cast<size_t>(block_)];
    if (event) event->block_done = true;
    // Early stop (dInfer): a finished block holding EOS means everything after it is EOS,
    // unless the caller pinned tokens further on (then the generation is not over).
    bool stop = false;
    if (params_.early_stop && params_.eos_id && last_pinned_ < b.gen_end && block_ + 1 < (int64_t)blocks_.size())
        for (int64_t p = b.gen_start; p < b.gen_end && !stop; ++p) stop = stops(x_[static_cast<size_t>(p)]);
    if (stop) stop_with_eos(b.gen_end, event);
    // The exact cache keeps a finished block's keys/values computed from its final tokens;
    // the last block (or one that ends the generation) needs none.
    if (!done_ && params_.cache == CacheMode::Block && block_ + 1 < static_cast<int64_t>(blocks_.size())) {
        pending_ = StepKind::Store;
        pending_block_ = block_;
    }
    ++block_;
    step_ = 0;
    forwards_in_block_ = 0;
    entered_block_ = false;
}

void Decoder::stop_with_eos(int64_t from, StepEvent* event) {
    for (int64_t p = from; p < length(); ++p) {
        if (x_[static_cast<size_t>(p)] != params_.mask_id) continue;
        x_[static_cast<size_t>(p)] = *params_.eos_id;
        if (event) {
            event->positions.push_back(p);
            event->tokens.push_back(*params_.eos_id);
            ++event->filled;
        }
    }
    done_ = true;
}

// LLaDA2 (the early stop of its own generate): once the first EOS of the generated region has no
// hole left before it, every token up to it is final, so the generation ends mid-block; the steps
// the block had left could only fill positions after that EOS. Earlier blocks are finished.
void Decoder::stop_at_settled_eos(StepEvent* event) {
    if (!params_.early_stop || !params_.eos_id) return;
    for (int64_t p = blocks_[static_cast<size_t>(block_)].start; p < length(); ++p) {
        const int64_t id = x_[static_cast<size_t>(p)];
        if (id == params_.mask_id && hole_[static_cast<size_t>(p)]) return;
        if (p >= prompt_length_ && stops(id)) {
            if (last_pinned_ < p) stop_with_eos(p + 1, event);  // a pinned token further on: not over
            return;
        }
    }
}

StepContext Decoder::context() const {
    return {timesteps_, step_, steps_per_block_, block_masks_, rng_, global_step()};
}

void Decoder::settle(StepEvent* event) {
    while (!done_) {
        if (block_ >= static_cast<int64_t>(blocks_.size())) {
            done_ = true;
            break;
        }
        if (pending_ != StepKind::Full) {  // prefill or store: a pass that scores nothing
            targets_.clear();
            build_request();
            return;
        }
        std::vector<int64_t> masked = masked_in_block();
        if (masked.empty()) {
            finish_block(event);
            continue;
        }
        if (!entered_block_) {
            entered_block_ = true;
            block_masks_ = static_cast<int64_t>(masked.size());
        }
        if (step_ >= steps_per_block_) throw StateError("schedule ran out of steps with masks left (internal error)");
        targets_ = step_targets(params_, std::move(masked), context());
        if (targets_.empty()) {
            ++step_;
            continue;
        }
        build_request();
        return;
    }
}

StepKind Decoder::step_kind() const {
    if (pending_ != StepKind::Full) return pending_;
    if (params_.cache == CacheMode::None) return StepKind::Full;
    if (params_.cache == CacheMode::Block) return StepKind::Denoise;
    return forwards_in_block_ == 0 ? StepKind::Refresh : StepKind::Window;
}

// The one home of the window rule. A window step recomputes [block start - shift, end): end is
// the sequence end (prefix) or the block end (dual), and the shift keeps the row that predicts
// the block's first position (shift_logits) inside the window; it attends to the cache of every
// position outside. Full and refresh passes cover the whole sequence. Under cache `block` every
// window is one absolute block (prefill: every block before the first decoded one) and its
// past is exactly the blocks before it, each stored once from its final tokens.
Request Decoder::plan(StepKind kind, const Block& b) const {
    Request r;
    r.kind = kind;
    r.window_end = length();
    switch (kind) {
        case StepKind::Full:
            break;
        case StepKind::Refresh:
            r.stores_cache = true;
            break;
        case StepKind::Window:
            r.window_start = std::max<int64_t>(0, b.start - (params_.shift_logits ? 1 : 0));
            if (params_.cache == CacheMode::Dual) r.window_end = b.end;
            r.past_length = length() - (r.window_end - r.window_start);
            break;
        case StepKind::Prefill:
            r.window_end = b.start;  // b: the first decoded block
            r.stores_cache = true;
            break;
        case StepKind::Store:
        case StepKind::Denoise:
            r.window_start = r.past_length = b.start;
            r.window_end = b.end;
            r.stores_cache = kind == StepKind::Store;
            break;
    }
    return r;
}

void Decoder::build_request() {
    const StepKind kind = step_kind();
    const size_t b = static_cast<size_t>(kind == StepKind::Store ? pending_block_ : block_);
    Request r = plan(kind, blocks_[b]);
    r.batch = batch();
    r.block = block_;
    r.step = static_cast<int64_t>(global_step());
    const int64_t shift = params_.shift_logits ? 1 : 0;
    for (int64_t p : targets_) r.logits_index.push_back(std::max<int64_t>(0, p - shift) - r.window_start);
    request_ = std::move(r);
}

int64_t Decoder::max_window() const {
    if (params_.cache == CacheMode::None) return length();
    const bool block = params_.cache == CacheMode::Block;
    int64_t widest = block ? blocks_.front().start : 0;  // the prefill
    for (const Block& b : blocks_) {
        const Request r = plan(block ? StepKind::Denoise : StepKind::Window, b);
        widest = std::max(widest, r.window_end - r.window_start);
    }
    return widest;
}

std::vector<int64_t> Decoder::block_ends() const {
    std::vector<int64_t> out;
    for (const Block& b : blocks_) out.push_back(b.gen_end);
    return out;
}

int64_t Decoder::final_end() const {
    if (done_) return length();
    return blocks_[static_cast<size_t>(block_)].gen_start;
}

const Request& Decoder::current_request() const {
    if (done_) throw StateError("the decoder is done; there is no next request");
    return request_;
}

Request Decoder::next_request() const {
    const Claim claim(use_, "next_request");
    return current_request();
}

std::vector<int64_t> Decoder::input_ids() const {
    const Claim claim(use_, "input_ids");
    const Request& r = current_request();
    const int64_t w = r.window_end - r.window_start;
    std::vector<int64_t> out(static_cast<size_t>(r.batch * w));
    for (int64_t i = 0; i < w; ++i) {
        const auto p = static_cast<size_t>(r.window_start + i);
        out[static_cast<size_t>(i)] = x_[p];
        if (r.batch == 2) out[static_cast<size_t>(w + i)] = hole_[p] ? x_[p] : params_.mask_id;
    }
    return out;
}

StepEvent Decoder::advance(const LogitsView& logits, LogitsLayout layout) {
    const Claim claim(use_, "advance");
    const Request& r = current_request();
    const auto count = static_cast<int64_t>(targets_.size());
    const int64_t rows = layout == LogitsLayout::Window ? r.window_end - r.window_start : count;
    if (logits.batch != r.batch || logits.rows != rows || logits.vocab < 1)
        throw InputError("logits have shape (" + std::to_string(logits.batch) + ", " + std::to_string(logits.rows) +
                         ", " + std::to_string(logits.vocab) + "), expected (" + std::to_string(r.batch) + ", " +
                         std::to_string(rows) + ", V)");
    LogitsView view = logits;
    view.row_index = layout == LogitsLayout::Window ? r.logits_index.data() : nullptr;
    std::vector<RowScore> scores(static_cast<size_t>(count));
    score_rows(view, count, params_.cfg_scale, rules_, rng_, global_step(), targets_.data(), scores.data(),
               params_.threads);

    StepEvent ev;
    ev.block = block_;
    ev.step = static_cast<int64_t>(global_step());
    if (pending_ != StepKind::Full) {  // a prefill or store pass: nothing to score
        pending_ = StepKind::Full;
        settle(&ev);
        ev.done = done_;
        ev.final_end = final_end();
        return ev;
    }
    for (size_t k : choose_commits(params_, scores, targets_, context())) {
        const int64_t p = targets_[k];
        x_[static_cast<size_t>(p)] = scores[k].token;
        ev.positions.push_back(p);
        ev.tokens.push_back(scores[k].token);
    }
    ++forwards_in_block_;
    ++step_;
    if (params_.algorithm == Algorithm::Llada2) stop_at_settled_eos(&ev);
    settle(&ev);
    ev.done = done_;
    ev.final_end = final_end();
    return ev;
}

}  // namespace unmask
