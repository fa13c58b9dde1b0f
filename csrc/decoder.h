// The decoding state machine: owns the sequence, the schedule and the cache policy.
// Python asks next_request() what to compute, runs the forward, hands the logits to advance().
#pragma once
#include <cstdint>
#include <vector>

#include "guard.h"
#include "params.h"
#include "policy.h"
#include "rng.h"
#include "scoring.h"

namespace unmask {

// Which forward pass a request is. The kind is a label (stats, readers); what the engine must do
// is spelled out on the request itself (past_length, stores_cache), so a new kind, such as a
// block-diffusion prefill or store pass, adds a case here and in Decoder::plan, not in Python.
enum class StepKind {
    Full,     // no cache: the whole sequence, nothing kept
    Refresh,  // a block's first cached pass: the whole sequence, its presents become the cache
    Window,   // a later step of the block: the window against the cached past, presents dropped
    // cache `block` (block-causal models, exact):
    Prefill,  // the complete prompt blocks once, stored; no logits
    Denoise,  // a step of the block: the block against the cache of every block before it
    Store,    // the finished block with its final tokens against the same past, stored; no logits
};

// What the next forward pass must compute.
struct Request {
    StepKind kind = StepKind::Full;
    int64_t window_start = 0, window_end = 0;  // absolute positions [start, end) recomputed
    int64_t past_length = 0;    // cached positions attended to: the first past_length outside the window, in order
    bool stores_cache = false;  // the window's presents become the cache at [window_start, window_end)
                                // (prefill and store: a slice of the cache; refresh: all of it)
    std::vector<int64_t> logits_index;  // window rows whose logits are needed (shift applied)
    int64_t batch = 1;                  // 2 with classifier-free guidance (row 1 = prompt masked)
    int64_t block = 0, step = 0;        // step: global schedule step
};

// How advance() reads its logits: one row per logits_index entry, in that order, or the whole
// window (the decoder picks the logits_index rows itself).
enum class LogitsLayout { Rows, Window };

// What one advance() committed.
struct StepEvent {
    std::vector<int64_t> positions, tokens;  // model commits (ascending), then early-stop EOS fills
    int64_t block = 0, step = 0;
    int64_t filled = 0;     // trailing entries written by early stop
    int64_t final_end = 0;  // generation positions before this are final (every block there finished)
    bool block_done = false, done = false;
};

// Every call that reads or writes the changing state claims the decoder (guard.h): advance()
// runs without the GIL, so a second thread calling in meanwhile gets a StateError instead of
// racing on freed buffers. The rest is fixed at construction.
class Decoder {
public:
    // prompt: P ids; fixed: gen_length ids (mask id = hole, else pinned) or empty;
    // infill: mask ids inside the prompt are holes, filled with the first block.
    Decoder(const DecodeParams& params, std::vector<int64_t> prompt, const std::vector<int64_t>& fixed, bool infill);

    bool done() const {
        const Claim claim(use_, "done");
        return done_;
    }
    std::vector<int64_t> ids() const {  // a copy, taken under the claim
        const Claim claim(use_, "ids");
        return x_;
    }
    int64_t prompt_length() const { return prompt_length_; }
    int64_t length() const { return static_cast<int64_t>(x_.size()); }
    const DecodeParams& params() const { return params_; }
    int64_t batch() const { return params_.cfg_scale > 0 ? 2 : 1; }  // rows of every request
    std::vector<int64_t> block_ends() const;  // absolute end of each block's generation region
    int64_t max_window() const;  // widest window of a step other than a whole-sequence refresh

    Request next_request() const;            // a copy, taken under the claim
    std::vector<int64_t> input_ids() const;  // [batch, window] row-major
    // logits [batch, K, V] in logits_index order (Rows) or [batch, W, V] for the whole window (Window).
    StepEvent advance(const LogitsView& logits, LogitsLayout layout);

private:
    struct Block {
        int64_t start, end;          // window range (block 0 also spans infill holes in the prompt)
        int64_t gen_start, gen_end;  // its part of the generation region
    };

    const Request& current_request() const;  // next_request() without the claim
    uint64_t global_step() const { return static_cast<uint64_t>(block_ * steps_per_block_ + step_); }
    StepContext context() const;
    StepKind step_kind() const;                         // the kind of the step about to run
    Request plan(StepKind kind, const Block& b) const;  // window, past and storage of a step of block b
    int64_t final_end() const;
    std::vector<int64_t> masked_in_block() const;
    void settle(StepEvent* event);  // skip steps that commit nothing, finish blocks, build the request
    void finish_block(StepEvent* event);
    void stop_with_eos(int64_t from, StepEvent* event);  // holes from `from` on become EOS; done
    void stop_at_settled_eos(StepEvent* event);         // LLaDA2's mid-block early stop
    void build_request();
    void lay_out_sdar(int64_t first_hole);  // blocks aligned to absolute position 0, canvas padded to a block
    bool stops(int64_t token) const;        // early stop's trigger: EOS (SDAR: EOS or EoT)

    DecodeParams params_;
    CounterRng rng_;
    TokenRules rules_;
    std::vector<int64_t> x_;
    std::vector<char> hole_;  // masked at the start: the positions the loop fills
    std::vector<Block> blocks_;
    std::vector<float> timesteps_;
    int64_t prompt_length_ = 0, steps_per_block_ = 1, last_pinned_ = -1;
    int64_t block_ = 0, step_ = 0, block_masks_ = 0, forwards_in_block_ = 0;
    bool entered_block_ = false, done_ = false;
    StepKind pending_ = StepKind::Full;  // Prefill or Store: a pass that scores nothing runs next
    int64_t pending_block_ = -1;         // the block a Store pass stores
    std::vector<int64_t> targets_;  // positions the current request scores
    Request request_;
    mutable InUse use_;
};

}  // namespace unmask
