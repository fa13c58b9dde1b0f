#include "numpy_io.h"

#include <string>

#include "errors.h"

namespace unmask::py_io {
namespace {

IdArray to_array(const std::vector<int64_t>& v) { return IdArray(static_cast<py::ssize_t>(v.size()), v.data()); }

// A contiguous float32/float16 [batch, rows, vocab] view; `keep` holds the buffer alive.
LogitsView view_of(const py::array& logits, py::array& keep, int64_t want_batch_dims) {
    const py::dtype dt = logits.dtype();
    const bool f32 = dt.is(py::dtype::of<float>());
    const bool f16 = dt.kind() == 'f' && dt.itemsize() == 2;
    if (!f32 && !f16)
        throw InputError("logits dtype " + std::string(py::str(dt)) + ", expected float32 or float16");
    if (logits.ndim() != want_batch_dims) {
        std::string shape = "(";
        for (py::ssize_t i = 0; i < logits.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(logits.shape(i));
        throw InputError("logits have shape " + shape + "), expected " + std::to_string(want_batch_dims) + " dims");
    }
    keep = py::array::ensure(logits, py::array::c_style);
    LogitsView v;
    v.data = keep.data();
    v.dtype = f32 ? DType::F32 : DType::F16;
    v.batch = want_batch_dims == 3 ? keep.shape(0) : 1;
    v.rows = keep.shape(want_batch_dims - 2);
    v.vocab = keep.shape(want_batch_dims - 1);
    return v;
}

StepEvent advance_view(Decoder& d, const py::array& logits, LogitsLayout layout) {
    py::array keep;
    const LogitsView v = view_of(logits, keep, 3);
    py::gil_scoped_release release;
    return d.advance(v, layout);
}

}  // namespace

void register_errors() {
    // Leaked on purpose: the classes must outlive every translator call, even at interpreter exit.
    static py::object* config = new py::object(py::module_::import("unmask.errors").attr("ConfigError"));
    static py::object* model = new py::object(py::module_::import("unmask.errors").attr("ModelFormatError"));
    static py::object* input = new py::object(py::module_::import("unmask.errors").attr("InputError"));
    static py::object* state = new py::object(py::module_::import("unmask.errors").attr("StateError"));
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const ConfigError& e) {
            PyErr_SetString(config->ptr(), e.what());
        } catch (const ModelFormatError& e) {
            PyErr_SetString(model->ptr(), e.what());
        } catch (const InputError& e) {
            PyErr_SetString(input->ptr(), e.what());
        } catch (const StateError& e) {
            PyErr_SetString(state->ptr(), e.what());
        }
    });
}

Decoder make(const DecodeParams& params, const IdArray& prompt, const py::object& fixed, bool infill) {
    std::vector<int64_t> p(prompt.data(), prompt.data() + prompt.size());
    std::vector<int64_t> f;
    if (!fixed.is_none()) {
        const auto t = fixed.cast<IdArray>();
        f.assign(t.data(), t.data() + t.size());
    }
    return Decoder(params, std::move(p), f, infill);
}

IdArray ids(const Decoder& d) { return to_array(d.ids()); }
IdArray block_ends(const Decoder& d) { return to_array(d.block_ends()); }
IdArray logits_index(const Request& r) { return to_array(r.logits_index); }
IdArray positions(const StepEvent& e) { return to_array(e.positions); }
IdArray tokens(const StepEvent& e) { return to_array(e.tokens); }

IdArray input_ids(const Decoder& d) {
    const Request r = d.next_request();
    const std::vector<int64_t> flat = d.input_ids();
    const int64_t width = r.window_end - r.window_start;
    if (static_cast<int64_t>(flat.size()) != r.batch * width)  // two claims: another thread advanced between
        throw StateError("input_ids: the decoder advanced in another thread during the call");
    IdArray out({r.batch, width});
    std::copy(flat.begin(), flat.end(), out.mutable_data());
    return out;
}

StepEvent advance(Decoder& d, const py::array& logits) { return advance_view(d, logits, LogitsLayout::Rows); }
StepEvent advance_window(Decoder& d, const py::array& logits) { return advance_view(d, logits, LogitsLayout::Window); }

py::tuple score(const DecodeParams& params, const py::array& logits, uint64_t step, int threads) {
    py::array keep;
    const LogitsView v = view_of(logits, keep, params.cfg_scale > 0 ? 3 : 2);
    const TokenRules rules = token_rules(params);
    std::vector<int64_t> positions(static_cast<size_t>(v.rows));
    for (int64_t r = 0; r < v.rows; ++r) positions[static_cast<size_t>(r)] = r;
    std::vector<RowScore> out(static_cast<size_t>(v.rows));
    {
        py::gil_scoped_release release;
        score_rows(v, v.rows, params.cfg_scale, rules, CounterRng{params.seed}, step, positions.data(), out.data(),
                   threads);
    }
    IdArray tok(v.rows);
    py::array_t<double> conf(v.rows);
    for (int64_t r = 0; r < v.rows; ++r) {
        tok.mutable_at(r) = out[static_cast<size_t>(r)].token;
        conf.mutable_at(r) = out[static_cast<size_t>(r)].confidence;
    }
    return py::make_tuple(tok, conf);
}

py::array_t<float> timesteps(int64_t steps, double eps) {
    const std::vector<float> t = dream_timesteps(steps, eps);
    return py::array_t<float>(static_cast<py::ssize_t>(t.size()), t.data());
}

}  // namespace unmask::py_io
