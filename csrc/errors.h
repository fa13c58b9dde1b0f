// C++ exception types of the core; register_errors (csrc/numpy_io.cpp) maps each to one Python class, once.
#pragma once
#include <stdexcept>
#include <string>

namespace unmask {

struct ConfigError : std::invalid_argument {      // -> unmask.ConfigError
    using std::invalid_argument::invalid_argument;
};
struct ModelFormatError : std::runtime_error {     // -> unmask.ModelFormatError
    using std::runtime_error::runtime_error;
};
struct InputError : std::invalid_argument {       // -> unmask.InputError, a ValueError (bad ids, bad logits)
    using std::invalid_argument::invalid_argument;
};
struct StateError : std::logic_error {            // -> unmask.StateError, a RuntimeError (out of order, concurrent)
    using std::logic_error::logic_error;
};

}  // namespace unmask
