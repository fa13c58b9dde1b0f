// Counter-based random numbers: every draw is a pure hash of (seed, step, position, index),
// so results never depend on how rows are split across threads.
#pragma once
#include <cstdint>

namespace unmask {

// Independent streams, so e.g. the Gumbel noise of token 3 never equals the
// position draw of position 3.
enum class Stream : uint64_t { TokenNoise = 1, TokenDraw = 2, RandomConfidence = 3, Reveal = 4, PositionDraw = 5 };

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

struct CounterRng {
    uint64_t seed = 0;

    uint64_t bits(Stream stream, uint64_t step, uint64_t position, uint64_t index) const {
        uint64_t h = splitmix64(seed ^ (static_cast<uint64_t>(stream) << 56));
        h = splitmix64(h ^ step);
        h = splitmix64(h ^ position);
        return splitmix64(h ^ index);
    }
    // Uniform in the open interval (0, 1): safe under log(u) and log(-log(u)).
    double uniform(Stream stream, uint64_t step, uint64_t position, uint64_t index) const {
        return (static_cast<double>(bits(stream, step, position, index) >> 11) + 0.5) * 0x1.0p-53;
    }
};

}  // namespace unmask
