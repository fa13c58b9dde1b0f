// Python bindings of the unmask core: one line per bound name, no logic here.
#include <pybind11/pybind11.h>

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
    m.doc() = "unmask C++ core: the parallel-unmasking decoder";
    m.attr("ABI_VERSION") = 1;
}
