// Python bindings of the unmask core: one line per bound name, no logic here
// (numpy conversions live in numpy_io.cpp, validation in the C++ core and runtime/decoding.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "numpy_io.h"
#include "row_pass.h"

namespace py = pybind11;
using namespace unmask;

PYBIND11_MODULE(_core, m) {
    m.doc() = "unmask C++ core: the parallel-unmasking decoder";
    m.attr("ABI_VERSION") = 3;
    m.attr("MAX_LENGTH") = kMaxLength;
    m.attr("MIN_TEMPERATURE") = kMinTemperature;
    m.def("max_threads", &max_threads);
    py_io::register_errors();

    py::enum_<Algorithm>(m, "Algorithm")
        .value("LOW_CONFIDENCE", Algorithm::LowConfidence)
        .value("RANDOM", Algorithm::Random)
        .value("ORIGIN", Algorithm::Origin)
        .value("MASKGIT_PLUS", Algorithm::MaskgitPlus)
        .value("TOPK_MARGIN", Algorithm::TopkMargin)
        .value("ENTROPY", Algorithm::Entropy)
        .value("SEQUENTIAL", Algorithm::Sequential)
        .value("LOW_CONFIDENCE_STATIC", Algorithm::LowConfidenceStatic)
        .value("LOW_CONFIDENCE_DYNAMIC", Algorithm::LowConfidenceDynamic)
        .value("ENTROPY_BOUNDED", Algorithm::EntropyBounded)
        .value("LLADA2", Algorithm::Llada2);
    py::enum_<CacheMode>(m, "CacheMode")
        .value("NONE", CacheMode::None)
        .value("PREFIX", CacheMode::Prefix)
        .value("DUAL", CacheMode::Dual)
        .value("BLOCK", CacheMode::Block);

    py::enum_<StepKind>(m, "StepKind")
        .value("FULL", StepKind::Full)
        .value("REFRESH", StepKind::Refresh)
        .value("WINDOW", StepKind::Window)
        .value("PREFILL", StepKind::Prefill)
        .value("DENOISE", StepKind::Denoise)
        .value("STORE", StepKind::Store);

    py::class_<DecodeParams>(m, "DecodeParams")
        .def(py::init<>())
        .def_readwrite("gen_length", &DecodeParams::gen_length)
        .def_readwrite("steps", &DecodeParams::steps)
        .def_readwrite("block_length", &DecodeParams::block_length)
        .def_readwrite("algorithm", &DecodeParams::algorithm)
        .def_readwrite("threshold", &DecodeParams::threshold)
        .def_readwrite("factor", &DecodeParams::factor)
        .def_readwrite("minimal_topk", &DecodeParams::minimal_topk)
        .def_readwrite("temperature", &DecodeParams::temperature)
        .def_readwrite("top_k", &DecodeParams::top_k)
        .def_readwrite("top_p", &DecodeParams::top_p)
        .def_readwrite("alg_temp", &DecodeParams::alg_temp)
        .def_readwrite("eps", &DecodeParams::eps)
        .def_readwrite("cfg_scale", &DecodeParams::cfg_scale)
        .def_readwrite("logits_eos_inf", &DecodeParams::logits_eos_inf)
        .def_readwrite("confidence_eos_eot_inf", &DecodeParams::confidence_eos_eot_inf)
        .def_readwrite("early_stop", &DecodeParams::early_stop)
        .def_readwrite("seed", &DecodeParams::seed)
        .def_readwrite("cache", &DecodeParams::cache)
        .def_readwrite("mask_id", &DecodeParams::mask_id)
        .def_readwrite("eos_id", &DecodeParams::eos_id)
        .def_readwrite("eot_id", &DecodeParams::eot_id)
        .def_readwrite("shift_logits", &DecodeParams::shift_logits)
        .def_readwrite("threads", &DecodeParams::threads);

    py::class_<Request>(m, "Request")
        .def_readonly("kind", &Request::kind)
        .def_readonly("window_start", &Request::window_start)
        .def_readonly("window_end", &Request::window_end)
        .def_readonly("past_length", &Request::past_length)
        .def_readonly("stores_cache", &Request::stores_cache)
        .def_property_readonly("logits_index", &py_io::logits_index)
        .def_readonly("batch", &Request::batch)
        .def_readonly("block", &Request::block)
        .def_readonly("step", &Request::step);

    py::class_<StepEvent>(m, "StepEvent")
        .def_property_readonly("positions", &py_io::positions)
        .def_property_readonly("tokens", &py_io::tokens)
        .def_readonly("block", &StepEvent::block)
        .def_readonly("step", &StepEvent::step)
        .def_readonly("filled", &StepEvent::filled)
        .def_readonly("final_end", &StepEvent::final_end)
        .def_readonly("block_done", &StepEvent::block_done)
        .def_readonly("done", &StepEvent::done);

    py::class_<Decoder>(m, "Decoder")
        .def(py::init(&py_io::make), py::arg("params"), py::arg("prompt_ids"), py::arg("template"), py::arg("infill"))
        .def_property_readonly("done", &Decoder::done)
        .def_property_readonly("ids", &py_io::ids)
        .def_property_readonly("prompt_length", &Decoder::prompt_length)
        .def_property_readonly("length", &Decoder::length)
        .def_property_readonly("batch", &Decoder::batch)
        .def_property_readonly("max_window", &Decoder::max_window)
        .def_property_readonly("block_ends", &py_io::block_ends)
        .def("next_request", &Decoder::next_request, py::return_value_policy::copy)
        .def("input_ids", &py_io::input_ids)
        .def("advance", &py_io::advance, py::arg("logits"))
        .def("advance_window", &py_io::advance_window, py::arg("logits"));

    m.def("score", &py_io::score, py::arg("params"), py::arg("logits"), py::arg("step") = 0, py::arg("threads") = 1);
    m.def("dream_timesteps", &py_io::timesteps, py::arg("steps"), py::arg("eps"));
    m.def("row_pass_isa", &row_pass_isa);
}
