// The numpy side of the bindings: array <-> C++ conversions, GIL release, error mapping.
// Kept out of bindings.cpp so that file stays one line per bound name.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "decoder.h"

namespace unmask::py_io {

namespace py = pybind11;
using IdArray = py::array_t<int64_t, py::array::c_style>;

void register_errors();  // C++ exception types -> unmask.ConfigError / ModelFormatError / InputError / StateError

Decoder make(const DecodeParams& params, const IdArray& prompt, const py::object& fixed, bool infill);
IdArray ids(const Decoder& d);
IdArray block_ends(const Decoder& d);
IdArray input_ids(const Decoder& d);
IdArray logits_index(const Request& r);
IdArray positions(const StepEvent& e);
IdArray tokens(const StepEvent& e);
StepEvent advance(Decoder& d, const py::array& logits);         // [batch, K, V] in logits_index order
StepEvent advance_window(Decoder& d, const py::array& logits);  // [batch, W, V] whole window

// Scores rows of logits [R, V] (or [2, R, V] with cfg_scale > 0) as the decoder would at `step`,
// row r keyed as position r: returns (tokens int64[R], confidence float64[R]). For tests and benchmarks.
py::tuple score(const DecodeParams& params, const py::array& logits, uint64_t step, int threads);
py::array_t<float> timesteps(int64_t steps, double eps);

}  // namespace unmask::py_io
