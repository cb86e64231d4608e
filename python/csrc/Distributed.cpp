// torch_rbln._C's part of torch.distributed: the factory behind the "rbln-ccl"
// backend (python/torch_rbln/distributed.py). The c10d::Backend it takes and
// returns is the type torch._C._distributed_c10d registered, so this file is
// compiled against the pybind11 that torch ships (CMakeLists.txt).
#include <torch/csrc/utils/pybind.h>

#include "runtime/distributed/RBLNProcessGroup.h"

namespace py = pybind11;

void bind_distributed(py::module_& m) {
  m.def("_ccl_backend", [](c10::intrusive_ptr<c10d::Backend> host) { return rbln::make_ccl_backend(std::move(host)); });
}
