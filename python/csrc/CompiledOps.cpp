// torch_rbln._C's part of the `compile` strategy (runtime/compiled/RBLNCompiledOps.h):
// the Python compiler behind a plan miss, and the counters explain() reads.
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "runtime/compiled/RBLNCompiledOps.h"

namespace py = pybind11;

namespace {

// Kept alive to the end of the process, past Python's own teardown: never destroyed.
py::object* keep(py::object o) { return new py::object(std::move(o)); }

}  // namespace

void bind_compiled_ops(py::module_& m) {
  // compile(name, overload, args, path) -> (status, message), cache_dir() -> str: op_compiler.py.
  m.def("_set_op_compiler", [](py::object compile, py::object cache_dir) {
    auto* compile_fn = keep(std::move(compile));
    auto* cache_dir_fn = keep(std::move(cache_dir));
    rbln::set_op_compiler(
        [compile_fn](const c10::OperatorHandle& op, const torch::jit::Stack& args, const std::string& path) {
          py::gil_scoped_acquire gil;
          try {
            py::list values;
            for (const auto& a : args) values.append(torch::jit::toPyObject(a));
            auto [status, message] = (*compile_fn)(op.schema().name(), op.schema().overload_name(), values, path)
                                         .cast<std::tuple<std::string, std::string>>();
            return rbln::CompileOutcome{status == "ok"        ? rbln::CompileOutcome::kOk
                                        : status == "invalid" ? rbln::CompileOutcome::kInvalid
                                                              : rbln::CompileOutcome::kFailed,
                                        message};
          } catch (py::error_already_set& e) {
            return rbln::CompileOutcome{rbln::CompileOutcome::kFailed, e.what()};
          }
        },
        [cache_dir_fn] {
          py::gil_scoped_acquire gil;
          return (*cache_dir_fn)().cast<std::string>();
        });
  });
  m.def("_compiled_op_counts", &rbln::compiled_op_counts);
  m.def("_compile_counts", &rbln::compile_counts);
  m.def("_plan_cache_info", [] {
    const auto i = rbln::plan_cache_info();
    return py::dict(py::arg("plans") = i.plans, py::arg("bytes") = i.bytes, py::arg("max_plans") = i.max_plans,
                    py::arg("max_bytes") = i.max_bytes, py::arg("hits") = i.hits, py::arg("misses") = i.misses,
                    py::arg("disk_loads") = i.disk_loads, py::arg("evictions") = i.evictions);
  });
  m.def("_set_plan_cache_limits", &rbln::set_plan_cache_limits, py::arg("max_plans") = 0, py::arg("max_bytes") = 0);
  m.def("_clear_plan_cache", &rbln::clear_plan_cache);
}
