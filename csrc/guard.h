// One caller at a time on an object whose methods may run without the GIL: each public call
// claims the object for its duration, and a second, concurrent call is refused with a
// StateError instead of racing on the same buffers.
#pragma once
#include <atomic>
#include <string>

#include "errors.h"

namespace unmask {

class InUse {
public:
    InUse() = default;
    InUse(const InUse&) {}  // a copy starts unclaimed: the claim belongs to a call, not to the state
    InUse& operator=(const InUse&) { return *this; }

    bool try_claim() { return !busy_.exchange(true, std::memory_order_acquire); }
    void release() { busy_.store(false, std::memory_order_release); }

private:
    std::atomic<bool> busy_{false};
};

// Holds a claim for one scope; throws when another thread holds it.
class Claim {
public:
    Claim(InUse& flag, const char* what) : flag_(flag) {
        if (!flag_.try_claim())
            throw StateError(std::string(what) + ": the decoder is in use by another thread (advance() is running); "
                             "use one decoder per thread, or serialise the calls");
    }
    ~Claim() { flag_.release(); }
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;

private:
    InUse& flag_;
};

}  // namespace unmask
