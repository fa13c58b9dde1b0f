// Rows in parallel on std::thread (not OpenMP: torch and onnxruntime bring their own
// thread runtimes into the same process). Exceptions are re-thrown on the caller.
// A thread that cannot be created (a container's pids limit, no memory for its stack) is
// not an error: the caller runs that slice itself, so the work only gets slower.
#pragma once
#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace unmask {

inline int resolve_threads(int requested) {
    if (requested > 0) return requested;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(std::min(hw, 16u));
}

// Calls fn(begin, end) on contiguous slices of [0, count), one slice per thread.
template <class F>
void parallel_for(int64_t count, int threads, F&& fn) {
    const int64_t n = std::max<int64_t>(1, std::min<int64_t>(resolve_threads(threads), count));
    if (n <= 1) {
        fn(int64_t{0}, count);
        return;
    }
    std::exception_ptr error;
    std::mutex error_lock;
    auto run = [&](int64_t t) {
        try {
            fn(count * t / n, count * (t + 1) / n);
        } catch (...) {
            std::lock_guard<std::mutex> guard(error_lock);
            if (!error) error = std::current_exception();
        }
    };
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(n - 1));
    int64_t started = 1;
    for (; started < n; ++started) {
        try {
            pool.emplace_back(run, started);
        } catch (const std::system_error&) {
            break;  // the slices from here on run on this thread
        }
    }
    for (int64_t t = started; t < n; ++t) run(t);
    run(0);
    for (auto& worker : pool) worker.join();
    if (error) std::rethrow_exception(error);
}

}  // namespace unmask
