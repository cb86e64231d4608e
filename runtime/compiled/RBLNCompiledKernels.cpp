#include "runtime/compiled/RBLNCompiledKernels.h"

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "runtime/fallback/RBLNFallback.h"
#include "runtime/device/RBLNFunctions.h"

namespace rbln {

struct CompiledKernel {
  std::string name;
  std::optional<DeviceOpCounter> counter;
  CompiledKernel(std::string n, bool counted) : name(std::move(n)) {
    if (counted) counter.emplace(name.c_str());
  }
};

namespace {
CompiledKernel* intern(const char* name, bool counted) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::unique_ptr<CompiledKernel>> kernels;  // never freed: queued work names them
  std::lock_guard<std::mutex> lock(mutex);
  auto& k = kernels[name];
  if (!k) k = std::make_unique<CompiledKernel>(name, counted);
  return k.get();
}
}  // namespace

CompiledKernel* compiled_kernel(const char* name) { return intern(name, /*counted=*/true); }
CompiledKernel* plan_kernel(const char* name) { return intern(name, /*counted=*/false); }

extern "C" void rbln_launch_compiled_kernel(CompiledKernel* kernel, const void* buffer,
                                            void (*run)(void* args), void* args, void (*destroy)(void* args)) {
  std::unique_ptr<void, void (*)(void*)> owned(args, destroy);
  auto device = static_cast<c10::DeviceIndex>(driver::device_of(buffer));  // -1 (current device) for host memory
  if (kernel->counter) kernel->counter->hit();
  launch(device, kernel->name.c_str(),
         [run, owned = std::move(owned)] { run(owned.get()); });
}

}  // namespace rbln
