// Work splitting for cores shared with other processes: the kernels' and the
// driver copies' (through the hook runtime/device/RBLNHooks.cpp installs).
#pragma once

#include <ATen/Parallel.h>

#include <atomic>
#include <cstdint>

namespace rbln {

// Runs body(item, chunk) for each item in [0, items) on `chunks` intra-op
// threads that claim items from a shared counter: a thread the OS delays
// (the cores are shared) leaves its items to the running ones, where a
// static split would wait for it. `chunk` names the calling thread's share
// (for its own buffers); which items a chunk gets is not fixed, so results
// must not depend on it.
template <class F>
void parallel_claim(int64_t items, int64_t chunks, F&& body) {
  std::atomic<int64_t> next{0};
  at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t item; (item = next.fetch_add(1)) < items;) body(item, c);
  });
}

}  // namespace rbln
