// kerncap._replay's mismatch-map calls (mismatch.hpp), module-level functions on a
// Session: mismatch_map(session, spec) -> dict, gather(...) / read_state(...) -> bytes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "mismatch.hpp"
#include "session.hpp"

namespace py = pybind11;

namespace kc::replay {

void bind_mismatch(py::module_& m) {
  py::class_<MapSpec>(m, "MapSpec")
      .def(py::init<>())
      .def_readwrite("item", &MapSpec::item)
      .def_readwrite("against", &MapSpec::against)
      .def_readwrite("dtype", &MapSpec::dtype)
      .def_readwrite("tolerance", &MapSpec::tolerance)
      .def_readwrite("atol", &MapSpec::atol)
      .def_readwrite("rtol", &MapSpec::rtol)
      .def_readwrite("view_start", &MapSpec::view_start)
      .def_readwrite("view_rows", &MapSpec::view_rows)
      .def_readwrite("view_cols", &MapSpec::view_cols)
      .def_readwrite("row_stride", &MapSpec::row_stride)
      .def_readwrite("grid_rows", &MapSpec::grid_rows)
      .def_readwrite("grid_cols", &MapSpec::grid_cols)
      .def_readwrite("first_k", &MapSpec::first_k);
  m.def(
      "mismatch_map",
      [](Session& s, const MapSpec& spec) {
        MapResult r;
        {
          py::gil_scoped_release unlocked;
          r = mismatch_map(s, spec);
        }
        py::dict d;
        d["totals"] = r.totals;
        d["err_hist"] = r.err_hist;
        d["ulp_hist"] = r.ulp_hist;
        d["value_hist"] = r.value_hist;
        d["cell_count"] = r.cell_count;
        d["cell_worst"] = r.cell_worst;
        d["row_profile"] = r.row_profile;
        d["col_profile"] = r.col_profile;
        d["first"] = r.first;
        d["tail_bytes"] = r.tail_bytes;
        d["seconds"] = r.seconds;
        return d;
      },
      py::arg("session"), py::arg("spec"));
  m.def(
      "gather",
      [](Session& s, size_t item, const std::string& which, const std::string& against, size_t element_size,
         const std::vector<unsigned long long>& indices) {
        std::string out;
        {
          py::gil_scoped_release unlocked;
          out = gather_elements(s, item, which, against, element_size, indices);
        }
        return py::bytes(out);
      },
      py::arg("session"), py::arg("item"), py::arg("which"), py::arg("against"), py::arg("element_size"),
      py::arg("indices"));
  m.def(
      "read_state",
      [](Session& s, size_t item, const std::string& which, const std::string& against, unsigned long long offset,
         unsigned long long length) {
        std::string out;
        {
          py::gil_scoped_release unlocked;
          out = read_state(s, item, which, against, offset, length);
        }
        return py::bytes(out);
      },
      py::arg("session"), py::arg("item"), py::arg("which"), py::arg("against"), py::arg("offset"),
      py::arg("length"));
}

}  // namespace kc::replay
