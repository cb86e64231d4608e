#include "runtime/RBLNCompiledKernels.h"

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/RBLNFallback.h"
#include "runtime/RBLNFunctions.h"

namespace rbln {

struct CompiledKernel {
  std::string name;
  DeviceOpCounter counter;
  explicit CompiledKernel(std::string n) : name(std::move(n)), counter(name.c_str()) {}
};

CompiledKernel* compiled_kernel(const char* name) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::unique_ptr<CompiledKernel>> kernels;  // never freed: queued work names them
  std::lock_guard<std::mutex> lock(mutex);
  auto& k = kernels[name];
  if (!k) k = std::make_unique<CompiledKernel>(name);
  return k.get();
}

extern "C" void rbln_launch_compiled_kernel(CompiledKernel* kernel, const void* buffer,
                                            void (*run)(void* args), void* args, void (*destroy)(void* args)) {
  std::unique_ptr<void, void (*)(void*)> owned(args, destroy);
  auto device = static_cast<c10::DeviceIndex>(driver::device_of(buffer));  // -1 (current device) for host memory
  kernel->counter.hit();
  launch(device, kernel->name.c_str(),
         [run, owned = std::move(owned)] { run(owned.get()); });
}

}  // namespace rbln
