// c10d's "rbln-ccl" backend: collectives on rbln tensors, staged through pinned
// host memory and carried by a host backend (Gloo, which the Python factory
// builds on the group's store). docs/distributed.md describes the design.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace rbln {

c10::intrusive_ptr<c10d::Backend> make_ccl_backend(c10::intrusive_ptr<c10d::Backend> host);

}  // namespace rbln
