// Counter-based (Philox-style) generator per device: a seed and an offset,
// like CUDA's, so a kernel can draw from any position without shared state.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <array>
#include <memory>
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

struct RBLNGeneratorImpl final : c10::GeneratorImpl {
  explicit RBLNGeneratorImpl(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Reserves `count` numbers for a kernel. Callers hold mutex_, as for the calls below.
  PhiloxArgs reserve(uint64_t count);

  // Graph capture: between these, reserve() hands out offsets within the
  // graph, read at replay from `replay`; capture_end returns the graph's total.
  void capture_begin(std::shared_ptr<const std::array<uint64_t, 2>> replay);
  uint64_t capture_end();
  // A replay's (seed, offset): the generator's now, which then advances by the graph's total.
  std::array<uint64_t, 2> replay_state(uint64_t increment);

 private:
  RBLNGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
  std::shared_ptr<const std::array<uint64_t, 2>> capture_;  // set while a graph captures
  uint64_t capture_offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);

}  // namespace rbln
