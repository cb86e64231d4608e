#include "runtime/device/RBLNGenerator.h"

#include <ATen/Functions.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/GeneratorImpl.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/device/RBLNFunctions.h"

namespace rbln {

void RBLNGeneratorState::capture_begin(std::shared_ptr<const std::array<uint64_t, 2>> replay) {
  std::lock_guard<std::mutex> lock(mutex);
  capture = std::move(replay);
  capture_offset = 0;
}

uint64_t RBLNGeneratorState::capture_end() {
  std::lock_guard<std::mutex> lock(mutex);
  capture.reset();
  return capture_offset;
}

std::array<uint64_t, 2> RBLNGeneratorState::replay_state(uint64_t increment) {
  std::lock_guard<std::mutex> lock(mutex);
  std::array<uint64_t, 2> now{seed, offset};
  offset += increment;
  return now;
}

RBLNGeneratorImpl::RBLNGeneratorImpl(c10::DeviceIndex device, c10::intrusive_ptr<RBLNGeneratorState> state)
    : c10::GeneratorImpl(c10::Device(kRBLN, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      state_(std::move(state)) {}

void RBLNGeneratorImpl::set_current_seed(uint64_t seed) {
  state_->seed = seed;
  state_->offset = 0;
}

uint64_t RBLNGeneratorImpl::seed() {
  set_current_seed(c10::detail::getNonDeterministicRandom(true));
  return state_->seed;
}

// The state is 16 bytes, seed then offset, in a CPU uint8 tensor like CUDA's.
c10::intrusive_ptr<c10::TensorImpl> RBLNGeneratorImpl::get_state() const {
  auto state = at::empty({16}, at::TensorOptions().dtype(at::kByte));
  uint64_t words[2] = {state_->seed, state_->offset};
  std::memcpy(state.data_ptr(), words, sizeof(words));
  return state.getIntrusivePtr();
}

void RBLNGeneratorImpl::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16 && state.is_cpu(),
              "RNG state must be a CPU torch.ByteTensor of 16 bytes, got ", state.numel(), " elements");
  uint64_t words[2];
  std::memcpy(words, state.data(), sizeof(words));
  state_->seed = words[0];
  state_->offset = words[1];
}

c10::intrusive_ptr<c10::GeneratorImpl> RBLNGeneratorImpl::graphsafe_get_state() const {
  return c10::make_intrusive<RBLNGeneratorImpl>(device().index(), state_);
}

void RBLNGeneratorImpl::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) {
  auto* other = dynamic_cast<RBLNGeneratorImpl*>(state.get());
  TORCH_CHECK(other, "graphsafe_set_state: an rbln generator takes the state of an rbln generator, got one of ",
              state->device());
  state_ = other->state_;
}

PhiloxArgs RBLNGeneratorImpl::reserve(uint64_t count) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  // A draw recorded into a graph must advance per replay: only a state the graph registered can.
  TORCH_CHECK(state_->capture || !driver::stream_is_capturing(current_stream(device().index())),
              "RBLNGeneratorImpl: a random op drew from a generator during RBLN graph capture without a registered "
              "capture state (register the generator with RBLNGraph.register_generator_state before the capture)");
  auto& offset = state_->capture ? state_->capture_offset : state_->offset;
  PhiloxArgs args{state_->seed, offset, state_->capture};
  offset += (count + 3) / 4 * 4;  // keep offsets aligned to Philox blocks
  return args;
}

// clone_state(): a generator with a state of its own, where this one's stands.
RBLNGeneratorImpl* RBLNGeneratorImpl::clone_impl() const {
  auto state = c10::make_intrusive<RBLNGeneratorState>();
  state->seed = state_->seed;
  state->offset = state_->offset;
  return new RBLNGeneratorImpl(device().index(), std::move(state));
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
