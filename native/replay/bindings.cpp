// kerncap._replay: the replay core for the replay server process
// (engine/kerncap/replay/server.py). Driver failures raise kerncap._replay.CudaError
// (args: message, CUresult code); other failures raise kerncap._replay.ReplayError
// (args: message, kind) with kind "capture", "variant", "address", "input" or "no_gpu".
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "session.hpp"

namespace py = pybind11;
using namespace kc::replay;

namespace kc::replay {
void bind_mismatch(py::module_& m);  // mismatch_bindings.cpp
void bind_sequence(py::module_& m, py::class_<Session>& session);  // sequence_bindings.cpp
}

namespace {

PyObject* g_cuda_error = nullptr;    // owned for the life of the process
PyObject* g_replay_error = nullptr;

py::object or_none(unsigned long long v) { return v == kNone ? py::object(py::none()) : py::object(py::int_(v)); }

py::dict to_dict(const CompareOut& o) {
  py::dict d;
  d["mismatched_bytes"] = o.mismatched_bytes;
  d["first_byte"] = or_none(o.first_byte);
  d["mismatched_elements"] = o.mismatched_elements;
  d["first_element"] = or_none(o.first_element);
  d["max_abs"] = o.max_abs;
  d["max_rel"] = o.max_rel;
  d["window_offset"] = o.window_offset;
  d["expected"] = py::bytes(o.expected);
  d["actual"] = py::bytes(o.actual);
  return d;
}

py::list to_list(const std::vector<CompareOut>& outs) {
  py::list l;
  for (const CompareOut& o : outs) l.append(to_dict(o));
  return l;
}

}  // namespace

PYBIND11_MODULE(_replay, m) {
  m.doc() = "kerncap replay core: VA-faithful restore, launch, timing and GPU-side compare";

  g_cuda_error = PyErr_NewException("kerncap._replay.CudaError", PyExc_RuntimeError, nullptr);
  g_replay_error = PyErr_NewException("kerncap._replay.ReplayError", PyExc_RuntimeError, nullptr);
  m.attr("CudaError") = py::handle(g_cuda_error);
  m.attr("ReplayError") = py::handle(g_replay_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kc::CudaError& e) {
      PyErr_SetObject(g_cuda_error, py::make_tuple(e.what(), static_cast<int>(e.code)).ptr());
    } catch (const Error& e) {
      PyErr_SetObject(g_replay_error, py::make_tuple(e.what(), e.kind).ptr());
    }
  });

  py::class_<SpanSpec>(m, "SpanSpec")
      .def(py::init<>())
      .def_readwrite("label", &SpanSpec::label)
      .def_readwrite("base", &SpanSpec::base)
      .def_readwrite("size", &SpanSpec::size);

  py::class_<ItemSpec>(m, "ItemSpec")
      .def(py::init<>())
      .def_readwrite("label", &ItemSpec::label)
      .def_readwrite("global_name", &ItemSpec::global_name)
      .def_readwrite("base", &ItemSpec::base)
      .def_readwrite("size", &ItemSpec::size)
      .def_readwrite("pre", &ItemSpec::pre)
      .def_readwrite("post", &ItemSpec::post)
      .def_readwrite("array", &ItemSpec::array)
      .def_readwrite("segments", &ItemSpec::segments)
      .def_readwrite("sparse", &ItemSpec::sparse)
      .def_readwrite("host", &ItemSpec::host);
  py::class_<HostSpec>(m, "HostSpec")
      .def(py::init<>())
      .def_readwrite("label", &HostSpec::label)
      .def_readwrite("base", &HostSpec::base)
      .def_readwrite("size", &HostSpec::size)
      .def_readwrite("device_pointer", &HostSpec::device_pointer);

  // CUDA arrays and texture/surface objects (arrays.hpp).
  py::class_<ArrayDescSpec>(m, "ArrayDescSpec")
      .def(py::init<>())
      .def_readwrite("format", &ArrayDescSpec::format)
      .def_readwrite("channels", &ArrayDescSpec::channels)
      .def_readwrite("flags", &ArrayDescSpec::flags)
      .def_readwrite("width", &ArrayDescSpec::width)
      .def_readwrite("height", &ArrayDescSpec::height)
      .def_readwrite("depth", &ArrayDescSpec::depth);
  py::class_<MipmapSpec>(m, "MipmapSpec")
      .def(py::init<>())
      .def_readwrite("label", &MipmapSpec::label)
      .def_readwrite("desc", &MipmapSpec::desc)
      .def_readwrite("levels", &MipmapSpec::levels);
  py::class_<ArraySpec>(m, "ArraySpec")
      .def(py::init<>())
      .def_readwrite("label", &ArraySpec::label)
      .def_readwrite("desc", &ArraySpec::desc)
      .def_readwrite("mipmap", &ArraySpec::mipmap)
      .def_readwrite("level", &ArraySpec::level);
  py::class_<ObjectSpec>(m, "ObjectSpec")
      .def(py::init<>())
      .def_readwrite("label", &ObjectSpec::label)
      .def_readwrite("surface", &ObjectSpec::surface)
      .def_readwrite("resource", &ObjectSpec::resource)
      .def_readwrite("why", &ObjectSpec::why)
      .def_readwrite("array", &ObjectSpec::array)
      .def_readwrite("mipmap", &ObjectSpec::mipmap)
      .def_readwrite("address", &ObjectSpec::address)
      .def_readwrite("size", &ObjectSpec::size)
      .def_readwrite("width", &ObjectSpec::width)
      .def_readwrite("height", &ObjectSpec::height)
      .def_readwrite("pitch", &ObjectSpec::pitch)
      .def_readwrite("format", &ObjectSpec::format)
      .def_readwrite("channels", &ObjectSpec::channels)
      .def_readwrite("resource_flags", &ObjectSpec::resource_flags)
      .def_readwrite("address_mode", &ObjectSpec::address_mode)
      .def_readwrite("filter_mode", &ObjectSpec::filter_mode)
      .def_readwrite("flags", &ObjectSpec::flags)
      .def_readwrite("max_anisotropy", &ObjectSpec::max_anisotropy)
      .def_readwrite("mipmap_filter_mode", &ObjectSpec::mipmap_filter_mode)
      .def_readwrite("mipmap_level_bias", &ObjectSpec::mipmap_level_bias)
      .def_readwrite("min_mipmap_level_clamp", &ObjectSpec::min_mipmap_level_clamp)
      .def_readwrite("max_mipmap_level_clamp", &ObjectSpec::max_mipmap_level_clamp)
      .def_readwrite("border_color", &ObjectSpec::border_color)
      .def_readwrite("has_view", &ObjectSpec::has_view)
      .def_readwrite("view_format", &ObjectSpec::view_format)
      .def_readwrite("view_width", &ObjectSpec::view_width)
      .def_readwrite("view_height", &ObjectSpec::view_height)
      .def_readwrite("view_depth", &ObjectSpec::view_depth)
      .def_readwrite("first_mipmap_level", &ObjectSpec::first_mipmap_level)
      .def_readwrite("last_mipmap_level", &ObjectSpec::last_mipmap_level)
      .def_readwrite("first_layer", &ObjectSpec::first_layer)
      .def_readwrite("last_layer", &ObjectSpec::last_layer);

  py::class_<LaunchSpec>(m, "LaunchSpec")
      .def(py::init<>())
      .def_readwrite("kernel_name", &LaunchSpec::kernel_name)
      .def_readwrite("grid", &LaunchSpec::grid)
      .def_readwrite("block", &LaunchSpec::block)
      .def_readwrite("shared_mem_bytes", &LaunchSpec::shared_mem_bytes)
      .def_readwrite("attributes", &LaunchSpec::attributes)
      .def_readwrite("cooperative", &LaunchSpec::cooperative)
      .def_readwrite("extra_form", &LaunchSpec::extra_form)
      .def_readwrite("param_buffer", &LaunchSpec::param_buffer)
      .def_readwrite("params", &LaunchSpec::params)
      .def_readwrite("handles", &LaunchSpec::handles);

  py::class_<FillSpec>(m, "FillSpec")
      .def(py::init<>())
      .def_readwrite("item", &FillSpec::item)
      .def_readwrite("offset", &FillSpec::offset)
      .def_readwrite("count", &FillSpec::count)
      .def_readwrite("dtype", &FillSpec::dtype)
      .def_readwrite("seed", &FillSpec::seed)
      .def_readwrite("mean", &FillSpec::mean)
      .def_readwrite("stddev", &FillSpec::stddev)
      .def_readwrite("lo", &FillSpec::lo)
      .def_readwrite("hi", &FillSpec::hi)
      .def_readwrite("p_zero", &FillSpec::p_zero);

  py::class_<CompareSpec>(m, "CompareSpec")
      .def(py::init<>())
      .def_readwrite("dtype", &CompareSpec::dtype)
      .def_readwrite("atol", &CompareSpec::atol)
      .def_readwrite("rtol", &CompareSpec::rtol);

  using release = py::call_guard<py::gil_scoped_release>;
  py::class_<Session> session(m, "Session");
  session
      .def(py::init<int>(), py::arg("device") = 0, release())
      .def("granularity", &Session::granularity)
      .def("compute_capability", &Session::compute_capability)
      .def("memory", &Session::memory)
      .def("device_name", &Session::device_name)
      .def("device_uuid", &Session::device_uuid)
      .def("ordinal", &Session::ordinal)
      .def("reserve", &Session::reserve, release())
      .def("map", &Session::map, release())
      .def("map_shared", &Session::map_shared, py::arg("groups"), release())
      .def("map_zero", &Session::map_zero, py::arg("ranges"), py::arg("chunk"), release())
      .def("register_host", &Session::register_host, py::arg("ranges"), py::arg("regions"), release())
      .def("load_state", &Session::load_state, py::arg("blob_dir"), py::arg("chunk_size"), py::arg("items"),
           py::arg("threads") = 4, release())
      .def("load_arrays", &Session::load_arrays, py::arg("mipmaps"), py::arg("arrays"), py::arg("objects"), release())
      .def("load_program", &Session::load_program, py::arg("key"), py::arg("spec"), py::arg("image"),
           py::arg("label"), py::arg("global_names") = std::vector<std::string>{}, release())
      .def("select_program", &Session::select_program, py::arg("key"))
      .def("drop_program", &Session::drop_program, py::arg("key"), release())
      .def("time", &Session::time, py::arg("iterations"), py::arg("warmup"), py::arg("flush_l2"),
           py::arg("warm_l2") = false, py::arg("kernel_timer") = false, release())
      .def("last_events_ms", &Session::last_events_ms)
      .def("set_time_inputs", &Session::set_time_inputs, py::arg("inputs"), release())
      .def("set_gaps", &Session::set_gaps, py::arg("gaps"), release())
      .def("gap_bytes", &Session::gap_bytes, release())
      .def("set_check", &Session::set_check, py::arg("on"), py::arg("specs") = std::vector<CompareSpec>{})
      .def("last_check", &Session::last_check)
      .def(
          "validate",
          [](Session& s, const std::vector<CompareSpec>& specs) {
            std::vector<CompareOut> outs;
            {
              py::gil_scoped_release unlocked;
              outs = s.validate(specs);
            }
            return to_list(outs);
          },
          py::arg("specs"))
      .def("restore", &Session::restore, release())
      .def("fill", &Session::fill, py::arg("fills"), release())
      .def("run", &Session::run, release())
      .def("keep_reference", &Session::keep_reference, py::arg("items"), py::arg("slot") = 0, release())
      .def("clear_references", &Session::clear_references)
      .def(
          "compare",
          [](Session& s, const std::vector<CompareSpec>& specs, const std::string& against) {
            std::vector<CompareOut> outs;
            {
              py::gil_scoped_release unlocked;
              outs = s.compare(specs, against);
            }
            return to_list(outs);
          },
          py::arg("specs"), py::arg("against"))
      .def(
          "read",
          [](Session& s, size_t item, unsigned long long offset, unsigned long long length) {
            std::string out;
            {
              py::gil_scoped_release unlocked;
              out = s.read(item, offset, length);
            }
            return py::bytes(out);
          },
          py::arg("item"), py::arg("offset"), py::arg("length"))
      .def("time_empty", &Session::time_empty, py::arg("iterations"), release())
      .def("pci_bus_id", &Session::pci_bus_id)
      .def("notes", &Session::notes)
      .def("health", &Session::health, release());
  bind_mismatch(m);  // where a variant differs (mismatch_bindings.cpp)
  bind_sequence(m, session);  // captured sequences (sequence_bindings.cpp)
}
