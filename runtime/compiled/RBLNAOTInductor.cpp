// AOTInductor packages on rbln (docs/deployment.md): what a package's C++ wrapper (python/torch_rbln/_inductor/
// cpp_wrapper.py) finds in the process that loads it, by name, so the package holds no path to this library.
// Its extern kernels' C shims, `aoti_torch_rbln_<op>`, are generated (generated/c_shim_rbln_*.cpp).
#include <mutex>
#include <string>
#include <unordered_map>

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include "runtime/compiled/RBLNCompiledKernels.h"

using torch::aot_inductor::new_tensor_handle;
using torch::aot_inductor::tensor_handle_to_tensor_pointer;

namespace {
const at::Tensor& t(AtenTensorHandle handle) { return *tensor_handle_to_tensor_pointer(handle); }

// A package's weights load as CPU tensors (upstream's model accepts cpu, cuda, xpu and mps only); each is copied
// to the device when the package loads (its runner), again after a swap (update_constant_buffer), and the copies
// are freed when the package is unloaded.
struct ConstantKey {
  const c10::TensorImpl* source;
  c10::DeviceIndex device;
  bool operator==(const ConstantKey& o) const { return source == o.source && device == o.device; }
};
struct ConstantKeyHash {
  size_t operator()(const ConstantKey& k) const { return std::hash<const void*>()(k.source) ^ k.device; }
};
struct DeviceConstant {
  c10::weak_intrusive_ptr<c10::TensorImpl> source;  // an entry whose weights are gone is dropped
  at::Tensor copy;
};

struct DeviceConstants {
  std::mutex mutex;
  std::unordered_map<ConstantKey, DeviceConstant, ConstantKeyHash> copies;
};
DeviceConstants& device_constants() {
  static DeviceConstants constants;
  return constants;
}

at::Tensor device_constant(const at::Tensor& source, c10::DeviceIndex device_index) {
  auto& [mutex, device_copies] = device_constants();
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = device_copies.begin(); it != device_copies.end();) {
    it = it->second.source.expired() ? device_copies.erase(it) : std::next(it);
  }
  const ConstantKey key{source.unsafeGetTensorImpl(), device_index};
  auto it = device_copies.find(key);
  if (it == device_copies.end()) {
    it = device_copies.emplace(key, DeviceConstant{c10::weak_intrusive_ptr<c10::TensorImpl>(source.getIntrusivePtr()),
                                                   source.to(c10::Device(c10::DeviceType::PrivateUse1, device_index))})
             .first;
  }
  return it->second.copy;
}

// An unloaded package's weights: their device copies are freed with it, not at some later package's call.
void drop_device_constant(const at::Tensor& source) {
  auto& [mutex, device_copies] = device_constants();
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = device_copies.begin(); it != device_copies.end();) {
    it = it->first.source == source.unsafeGetTensorImpl() ? device_copies.erase(it) : std::next(it);
  }
}
}  // namespace

extern "C" {

void* rbln_aoti_kernel(const char* name) { return rbln::plan_kernel(name); }

AOTITorchError rbln_aoti_constant(AtenTensorHandle constant, int32_t device_index, AtenTensorHandle* ret0) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE(
      { *ret0 = new_tensor_handle(device_constant(t(constant), static_cast<c10::DeviceIndex>(device_index))); });
}

}  // extern "C"

namespace {
// The rbln device a package is loaded on ("rbln:<index>", or "rbln" for the current device).
c10::Device package_device(const std::string& device_str) {
  c10::Device device(device_str);
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "an rbln package runs on rbln, not on ", device_str);
  if (!device.has_index()) device.set_index(c10::impl::getDeviceGuardImpl(device.type())->getDevice().index());
  return device;
}

// Weight swaps (AOTIModelPackageLoader::load_constants, update_constant_buffer) take the weights on rbln too,
// as CUDA's take them on CUDA. The model's weights are CPU tensors and the package's own update accepts only
// their device type, so it gets CPU copies of the rbln ones; the next call copies them to the device. User-managed
// weights are used where they are, so rbln ones are refused.
using ConstantMap = std::unordered_map<std::string, AtenTensorHandle>;
using UpdateFn = AOTIRuntimeError (*)(AOTInductorModelContainerHandle, AOTInductorConstantMapHandle, bool, bool);
struct PackageUpdates {
  UpdateFn copying, from_cpu, user_managed;
};
std::mutex updates_mutex;
std::unordered_map<AOTInductorModelContainerHandle, PackageUpdates> package_updates;  // the loaded packages'

template <UpdateFn PackageUpdates::*update>
AOTIRuntimeError update_from_rbln(AOTInductorModelContainerHandle container, AOTInductorConstantMapHandle map,
                                  bool use_inactive, bool validate_full_update) {
  UpdateFn package_update;
  {
    std::lock_guard<std::mutex> lock(updates_mutex);
    package_update = package_updates.at(container).*update;
  }
  ConstantMap weights = *reinterpret_cast<const ConstantMap*>(map);
  std::vector<at::Tensor> host_copies;  // alive until the package has copied them into its weights
  host_copies.reserve(weights.size());
  for (auto& [name, weight] : weights) {
    if (t(weight).device().type() != c10::DeviceType::PrivateUse1) continue;
    TORCH_CHECK(update != &PackageUpdates::user_managed, "weight ", name, " is on ", t(weight).device(),
                ": an rbln package's user-managed weights are CPU tensors (it copies them to the device)");
    host_copies.push_back(t(weight).cpu());
    weight = torch::aot_inductor::tensor_pointer_to_tensor_handle(&host_copies.back());
  }
  return package_update(container, reinterpret_cast<AOTInductorConstantMapHandle>(&weights), use_inactive,
                        validate_full_update);
}

// The runner AOTIModelPackageLoader makes for a package whose device is "rbln" (AOTI_DEVICE_KEY): the model is
// upstream's CPU model on "cpu:<index>" (it knows no other device name), whose wrapper allocates and launches on
// rbln:<index> (this->device_idx_).
class AOTIModelContainerRunnerRBLN : public torch::inductor::AOTIModelContainerRunner {
 public:
  AOTIModelContainerRunnerRBLN(const std::string& model_so_path, size_t num_models, const c10::Device device,
                               const std::string& bin_dir, bool run_single_threaded)
      : AOTIModelContainerRunner(model_so_path, num_models, "cpu:" + std::to_string(device.index()), bin_dir,
                                 run_single_threaded) {
    {
      std::lock_guard<std::mutex> lock(updates_mutex);
      package_updates[container_handle_] = {update_constant_buffer_func_, update_constant_buffer_from_cpu_func_,
                                            update_user_managed_constant_buffer_func_};
    }
    update_constant_buffer_func_ = &update_from_rbln<&PackageUpdates::copying>;
    update_constant_buffer_from_cpu_func_ = &update_from_rbln<&PackageUpdates::from_cpu>;
    update_user_managed_constant_buffer_func_ = &update_from_rbln<&PackageUpdates::user_managed>;
    // The weights go to the device at load, not at the first call.
    for (const auto& [fqn, weight] : extract_constants_map(/*use_inactive=*/false)) device_constant(weight, device.index());
  }
  ~AOTIModelContainerRunnerRBLN() override {
    for (const auto& [fqn, weight] : extract_constants_map(/*use_inactive=*/false)) drop_device_constant(weight);
    std::lock_guard<std::mutex> lock(updates_mutex);
    package_updates.erase(container_handle_);
  }
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create_runner(const std::string& model_so_path,
                                                                          size_t num_models,
                                                                          const std::string& device_str,
                                                                          const std::string& bin_dir,
                                                                          const bool run_single_threaded) {
  return std::make_unique<AOTIModelContainerRunnerRBLN>(model_so_path, num_models, package_device(device_str),
                                                        bin_dir, run_single_threaded);
}

const torch::inductor::RegisterAOTIModelRunner register_runner("rbln", &create_runner);
}  // namespace
