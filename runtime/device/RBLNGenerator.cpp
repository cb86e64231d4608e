#include "runtime/device/RBLNGenerator.h"

#include <ATen/Functions.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/GeneratorImpl.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/device/RBLNFunctions.h"

namespace rbln {

RBLNGeneratorImpl::RBLNGeneratorImpl(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(kRBLN, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(c10::default_rng_seed_val) {}

void RBLNGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t RBLNGeneratorImpl::seed() {
  set_current_seed(c10::detail::getNonDeterministicRandom(true));
  return seed_;
}

// The state is 16 bytes, seed then offset, in a CPU uint8 tensor like CUDA's.
c10::intrusive_ptr<c10::TensorImpl> RBLNGeneratorImpl::get_state() const {
  auto state = at::empty({16}, at::TensorOptions().dtype(at::kByte));
  uint64_t words[2] = {seed_, offset_};
  std::memcpy(state.data_ptr(), words, sizeof(words));
  return state.getIntrusivePtr();
}

void RBLNGeneratorImpl::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16 && state.is_cpu(),
              "RNG state must be a CPU torch.ByteTensor of 16 bytes, got ", state.numel(), " elements");
  uint64_t words[2];
  std::memcpy(words, state.data(), sizeof(words));
  seed_ = words[0];
  offset_ = words[1];
}

PhiloxArgs RBLNGeneratorImpl::reserve(uint64_t count) {
  // A draw recorded into a graph must advance per replay: only a generator the graph registered can.
  TORCH_CHECK(capture_ || !driver::stream_is_capturing(current_stream(device().index())),
              "RBLNGeneratorImpl: a random op drew from a generator during RBLN graph capture without a registered "
              "capture state (register the generator with RBLNGraph.register_generator_state before the capture)");
  auto& offset = capture_ ? capture_offset_ : offset_;
  PhiloxArgs args{seed_, offset, capture_};
  offset += (count + 3) / 4 * 4;  // keep offsets aligned to Philox blocks
  return args;
}

void RBLNGeneratorImpl::capture_begin(std::shared_ptr<const std::array<uint64_t, 2>> replay) {
  capture_ = std::move(replay);
  capture_offset_ = 0;
}

uint64_t RBLNGeneratorImpl::capture_end() {
  capture_.reset();
  return capture_offset_;
}

std::array<uint64_t, 2> RBLNGeneratorImpl::replay_state(uint64_t increment) {
  std::array<uint64_t, 2> state{seed_, offset_};
  offset_ += increment;
  return state;
}

RBLNGeneratorImpl* RBLNGeneratorImpl::clone_impl() const {
  auto* gen = new RBLNGeneratorImpl(device().index());
  gen->seed_ = seed_;
  gen->offset_ = offset_;
  return gen;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      generators.push_back(at::make_generator<RBLNGeneratorImpl>(d));
    }
  });
  return generators.at(resolve_device(device));
}

}  // namespace rbln
