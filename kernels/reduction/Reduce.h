// The reduction family's plan and loop, shared by every reduction kernel.
// The input is read as a contiguous [outer, inner, cols] block, and output
// element (o, c) folds the `inner` values x[o][0..inner)[c]. When the reduced
// dims are adjacent in a contiguous input, that block is the input itself: a
// reduction over the last dims has cols == 1 (rows), one over leading or
// middle dims has cols > 1 (columns, folded a tile of columns at a time, so
// the input is read in order). Other reductions move the reduced dims
// innermost in a copy (cols == 1).
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <vector>

#include "kernels/common/Common.h"
#include "runtime/device/RBLNParallel.h"

namespace rbln::kernels {

struct Lines {
  int64_t outer, inner, cols;
};

struct Plan {
  at::Tensor rows;  // the contiguous [outer, inner, cols] block, in the compute dtype
  std::vector<int64_t> out_sizes;
  Lines lines;
  int64_t inner() const { return lines.inner; }
  int64_t outputs() const { return lines.outer * lines.cols; }
};

// dims: the dims to reduce (none: all; empty: all, sum's rule, or with
// !empty_reduces_all none, all/any's); compute: the dtype rows are converted to.
Plan plan(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::ScalarType compute,
          bool empty_reduces_all = true);

// Calls tile(o, c0, w) for columns [c0, c0 + w) of every outer index o, in
// tiles of up to kColumnTile columns (their accumulators stay in L1), the
// tiles claimed by ATen's threads. Runs on the calling thread (a launched task).
constexpr int64_t kColumnTile = 128;
template <class F>
void for_column_tiles(Lines l, F tile) {
  const int64_t tiles = (l.cols + kColumnTile - 1) / kColumnTile, tasks = l.outer * tiles;
  auto run = [&](int64_t t, int64_t) {
    const int64_t c0 = t % tiles * kColumnTile;
    tile(t / tiles, c0, std::min(kColumnTile, l.cols - c0));
  };
  if (tasks == 1 || l.outer * l.inner * l.cols < 4 * kGrainSize) {
    for (int64_t t = 0; t < tasks; ++t) run(t, 0);
  } else {
    parallel_claim(tasks, std::min<int64_t>(at::get_num_threads(), tasks), run);
  }
}

// For each output i = o * cols + c: store(i, acc) with
// acc = step(...step(init, x[o][0][c], 0)..., x[o][inner-1][c], inner-1).
// Runs on the calling thread (a launched task), split over ATen's threads.
template <class T, class Acc, class Step, class Store>
void reduce_lines(const T* in, Lines l, Acc init, Step step, Store store) {
  if (l.cols == 1) {
    at::parallel_for(0, l.outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(l.inner, 1)),
                     [&](int64_t b, int64_t e) {
                       for (int64_t o = b; o < e; ++o) {
                         const T* x = in + o * l.inner;
                         Acc acc = init;
                         for (int64_t r = 0; r < l.inner; ++r) acc = step(acc, x[r], r);
                         store(o, acc);
                       }
                     });
    return;
  }
  for_column_tiles(l, [&](int64_t o, int64_t c0, int64_t w) {
    Acc acc[kColumnTile];
    std::fill_n(acc, w, init);
    const T* x = in + o * l.inner * l.cols + c0;
    for (int64_t r = 0; r < l.inner; ++r, x += l.cols)
      for (int64_t c = 0; c < w; ++c) acc[c] = step(acc[c], x[c], r);
    for (int64_t c = 0; c < w; ++c) store(o * l.cols + c0 + c, acc[c]);
  });
}

// Queues reduce_lines over the plan on `out`'s stream (store writes the outputs).
template <class T, class Acc, class Step, class Store>
void launch_lines(const Plan& p, const at::Tensor& out, const char* name, Acc init, Step step, Store store) {
  if (p.outputs() == 0) return;
  const T* in = p.rows.const_data_ptr<T>();
  const Lines l = p.lines;
  launch_on(out, name, [=] { reduce_lines(in, l, init, step, store); });
}

// Queues f(o) for every row o of lines whose cols == 1, the rows split over the threads.
template <class F>
void launch_rows(const at::Tensor& out, const char* name, Lines l, F f) {
  launch_on(out, name, [=] {
    at::parallel_for(0, l.outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(l.inner, 1)),
                     [&](int64_t b, int64_t e) {
                       for (int64_t o = b; o < e; ++o) f(o);
                     });
  });
}

}  // namespace rbln::kernels
