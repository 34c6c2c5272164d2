// kerncap._replay's sequence types and the Session's sequence methods (sequence.hpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "session.hpp"

namespace py = pybind11;

namespace kc::replay {

void bind_sequence(py::module_& m, py::class_<Session>& session) {
  py::class_<SeqGlobalSpec>(m, "SeqGlobalSpec")
      .def(py::init<>())
      .def_readwrite("index", &SeqGlobalSpec::index)
      .def_readwrite("name", &SeqGlobalSpec::name)
      .def_readwrite("captured", &SeqGlobalSpec::captured)
      .def_readwrite("size", &SeqGlobalSpec::size);
  py::class_<SeqModuleSpec>(m, "SeqModuleSpec")
      .def(py::init<>())
      // bytes both ways: a cubin is not UTF-8, and a std::string reads back as str
      .def_property(
          "image", [](const SeqModuleSpec& s) { return py::bytes(s.image); },
          [](SeqModuleSpec& s, const py::bytes& b) { s.image = std::string(b); })
      .def_readwrite("label", &SeqModuleSpec::label)
      .def_readwrite("globals", &SeqModuleSpec::globals);
  py::class_<SeqStepSpec>(m, "SeqStepSpec")
      .def(py::init<>())
      .def_readwrite("op", &SeqStepSpec::op)
      .def_readwrite("label", &SeqStepSpec::label)
      .def_readwrite("stream", &SeqStepSpec::stream)
      .def_readwrite("module", &SeqStepSpec::module)
      .def_readwrite("launch", &SeqStepSpec::launch)
      .def_readwrite("kind", &SeqStepSpec::kind)
      .def_readwrite("dst", &SeqStepSpec::dst)
      .def_readwrite("src", &SeqStepSpec::src)
      .def_readwrite("bytes", &SeqStepSpec::bytes)
      .def_property(
          "payload", [](const SeqStepSpec& s) { return py::bytes(s.payload); },
          [](SeqStepSpec& s, const py::bytes& b) { s.payload = std::string(b); })
      .def_readwrite("value", &SeqStepSpec::value)
      .def_readwrite("element", &SeqStepSpec::element)
      .def_readwrite("width", &SeqStepSpec::width)
      .def_readwrite("height", &SeqStepSpec::height)
      .def_readwrite("pitch", &SeqStepSpec::pitch)
      .def_readwrite("event", &SeqStepSpec::event)
      .def_readwrite("scope", &SeqStepSpec::scope)
      .def_readwrite("graph_deps", &SeqStepSpec::graph_deps);
  py::class_<SeqSpec>(m, "SeqSpec")
      .def(py::init<>())
      .def_readwrite("modules", &SeqSpec::modules)
      .def_readwrite("steps", &SeqSpec::steps)
      .def_readwrite("stream_kinds", &SeqSpec::stream_kinds)
      .def_readwrite("blocking", &SeqSpec::blocking)
      .def_readwrite("events", &SeqSpec::events)
      .def_readwrite("mode", &SeqSpec::mode)
      .def_readwrite("graph_edges", &SeqSpec::graph_edges);
  using release = py::call_guard<py::gil_scoped_release>;
  session
      .def("load_sequence", &Session::load_sequence, py::arg("key"), py::arg("spec"), py::arg("label"), release())
      .def("run_steps", &Session::run_steps, py::arg("begin"), py::arg("end"), release())
      .def("sequence_steps", &Session::sequence_steps)
      .def("time_steps", &Session::time_steps, py::arg("iterations"), py::arg("warmup"), release())
      .def("mask", &Session::mask, py::arg("spans"), py::arg("against"), release());
}

}  // namespace kc::replay
