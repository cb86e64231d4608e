// Counter-based (Philox-style) generator per device: a seed and an offset,
// like CUDA's, so a kernel can draw from any position without shared state.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <array>
#include <memory>
#include <mutex>
#include <utility>

namespace rbln {

// Where a kernel's draws start: fixed when it is launched eagerly; when it is
// captured in a graph, the graph's (seed, offset) that each replay sets before
// its work runs, plus the launch's offset within the graph (CUDA's
// PhiloxCudaState), so every replay draws new numbers.
struct PhiloxArgs {
  uint64_t seed, offset;
  std::shared_ptr<const std::array<uint64_t, 2>> replay;  // set for a captured launch
  std::pair<uint64_t, uint64_t> unpack() const {
    return replay ? std::make_pair((*replay)[0], (*replay)[1] + offset) : std::make_pair(seed, offset);
  }
};

// A generator's numbers: its seed and offset, and the graph capture recording draws from it. Generators can
// share one (graphsafe_get_state), and a graph records and advances the state, as CUDA's CUDAGeneratorState.
struct RBLNGeneratorState final : c10::intrusive_ptr_target {
  uint64_t seed = c10::default_rng_seed_val;
  uint64_t offset = 0;
  std::shared_ptr<const std::array<uint64_t, 2>> capture;  // set while a graph captures
  uint64_t capture_offset = 0;
  std::mutex mutex;  // generators sharing the state each have their own mutex_

  // Graph capture: between these, draws take offsets within the graph, read at replay from `replay`;
  // capture_end returns the graph's total.
  void capture_begin(std::shared_ptr<const std::array<uint64_t, 2>> replay);
  uint64_t capture_end();
  // A replay's (seed, offset): the state's now, which then advances by the graph's total.
  std::array<uint64_t, 2> replay_state(uint64_t increment);
};

struct RBLNGeneratorImpl final : c10::GeneratorImpl {
  explicit RBLNGeneratorImpl(c10::DeviceIndex device,
                             c10::intrusive_ptr<RBLNGeneratorState> state = c10::make_intrusive<RBLNGeneratorState>());

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return state_->seed; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { state_->offset = offset; }
  uint64_t get_offset() const override { return state_->offset; }
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  // torch.Generator.graphsafe_get_state/graphsafe_set_state: a generator sharing this one's state, and
  // drawing from another's from now on (a graph records draws from whichever state is current).
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Reserves `count` numbers for a kernel. Callers hold mutex_.
  PhiloxArgs reserve(uint64_t count);
  const c10::intrusive_ptr<RBLNGeneratorState>& state() const { return state_; }

 private:
  RBLNGeneratorImpl* clone_impl() const override;
  c10::intrusive_ptr<RBLNGeneratorState> state_;
};

const at::Generator& default_generator(c10::DeviceIndex device);

}  // namespace rbln
