// An AOTInductor package made for rbln (tests/cpp/aoti/make_aoti_package.py, a ctest fixture) loaded and run by
// a C++ program with no Python in the process: libtorch's AOTIModelPackageLoader finds the runner libtorch_rbln
// registers for "rbln", and the package finds the runtime's entries in this process.
#include <ATen/ATen.h>
#include <c10/core/DeviceType.h>
#include <gtest/gtest.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/fallback/RBLNFallback.h"

namespace {

const at::Device kRbln0(at::kPrivateUse1, 0);

std::string package_dir() {
  const char* dir = std::getenv("RBLN_AOTI_PACKAGE_DIR");
  return dir ? dir : "";
}

// What the Python step saved in <dir>/<name> with torch.save.
c10::IValue saved(const std::string& name) {
  std::ifstream file(package_dir() + "/" + name, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return torch::jit::pickle_load(bytes);
}

// [x, CPU's output for x, ...] as the Python step saved them.
std::vector<at::Tensor> inputs_and_expected() {
  const c10::IValue io = saved("io.pt");
  std::vector<at::Tensor> tensors;
  for (const auto& value : io.toListRef()) tensors.push_back(value.toTensor());
  return tensors;
}

uint64_t device_calls(const std::string& op) { return rbln::device_op_counts()[op]; }

std::string mapped_files() {
  std::ifstream maps("/proc/self/maps");
  return std::string((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
}

TEST(AOTIPackage, BackendAndRunnerAreRegisteredByTheLibrary) {
  EXPECT_EQ(c10::get_privateuse1_backend(), "rbln");
  EXPECT_EQ(torch::inductor::getAOTIModelRunnerRegistry().count("rbln"), 1u);
}

TEST(AOTIPackage, RunsOnRblnLikeCpuForTwoBatchSizes) {
  ASSERT_FALSE(package_dir().empty()) << "RBLN_AOTI_PACKAGE_DIR is not set";
  const auto io = inputs_and_expected();
  ASSERT_EQ(io.size(), 4u);
  torch::inductor::AOTIModelPackageLoader loader(package_dir() + "/model.pt2", "model", false, 1, /*device_index=*/0);
  EXPECT_EQ(loader.get_metadata()["AOTI_DEVICE_KEY"], "rbln");
  for (size_t i = 0; i < io.size(); i += 2) {
    const uint64_t addmm_before = device_calls("aten::addmm.out");
    const auto outputs = loader.run({io[i].to(kRbln0)});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].device(), kRbln0);
    EXPECT_GT(device_calls("aten::addmm.out"), addmm_before);  // the extern kernels ran as rbln ops
    EXPECT_EQ(outputs[0].sizes(), io[i + 1].sizes());
    EXPECT_TRUE(at::allclose(outputs[0].cpu(), io[i + 1], 1e-5, 1e-5)) << "batch " << io[i].size(0);
  }
  const std::string mapped = mapped_files();  // with the package's library loaded
  EXPECT_NE(mapped.find("libtorch_rbln.so"), std::string::npos);
  EXPECT_EQ(mapped.find("libpython"), std::string::npos);
  EXPECT_EQ(mapped.find("libtorch_python"), std::string::npos);
}

TEST(AOTIPackage, SwappedWeightsOnRblnAreUsed) {
  ASSERT_FALSE(package_dir().empty()) << "RBLN_AOTI_PACKAGE_DIR is not set";
  const at::Tensor x = inputs_and_expected()[0];
  const c10::IValue swap = saved("swap.pt");
  const auto& entries = swap.toGenericDict();
  std::unordered_map<std::string, at::Tensor> weights;
  for (const auto& entry : entries.at("weights").toGenericDict()) {
    weights.emplace(entry.key().toStringRef(), entry.value().toTensor().to(kRbln0));
  }
  torch::inductor::AOTIModelPackageLoader loader(package_dir() + "/model.pt2", "model", false, 1, /*device_index=*/0);
  loader.load_constants(weights, /*use_inactive=*/false, /*check_full_update=*/true);
  const auto outputs = loader.run({x.to(kRbln0)});
  EXPECT_EQ(outputs[0].device(), kRbln0);
  EXPECT_TRUE(at::allclose(outputs[0].cpu(), entries.at("expected").toTensor(), 1e-5, 1e-5));
}

}  // namespace
