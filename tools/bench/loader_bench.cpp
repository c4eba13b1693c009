// The image-folder loader's throughput: images/s of read + decode + random resized crop + flip +
// resize into a batch, on N loader threads, the way a training run gathers its batches
// (runtime/data/image_folder.cpp). tools/bench/loader_bench.py makes the folders and sets the
// numbers beside torchvision's DataLoader on the same files.
//
//   loader_bench DIR --size 32 [--channels 3] [--threads 2] [--batch 256] [--seconds 3] [--no-augment]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

#include "runtime/data/data.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: loader_bench DIR [--size S] [--channels C] [--threads N] [--batch B] [--seconds T] [--no-augment]\n");
    return 2;
  }
  const std::string dir = argv[1];
  int size = 32, channels = 3, threads = 2;
  int64_t batch = 256;
  double seconds = 3;
  bool augment = true;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atof(argv[++i]) : 0.0; };
    if (a == "--size") size = static_cast<int>(next());
    else if (a == "--channels") channels = static_cast<int>(next());
    else if (a == "--threads") threads = static_cast<int>(next());
    else if (a == "--batch") batch = static_cast<int64_t>(next());
    else if (a == "--seconds") seconds = next();
    else if (a == "--no-augment") augment = false;
    else {
      std::fprintf(stderr, "loader_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  pt::DataSpec spec;
  spec.sample_dims = {channels, size, size};
  spec.num_classes = 1000;
  pt::LoadOptions lo;
  lo.crop = lo.flip = augment;
  lo.loader_threads = threads;
  auto d = pt::load_dataset(dir, spec, lo);
  if (!d) {
    std::fprintf(stderr, "loader_bench: %s\n", d.status().message().c_str());
    return 2;
  }
  std::vector<int64_t> order(d->size());
  std::iota(order.begin(), order.end(), 0);
  pt::HostTensor x(pt::DType::kFloat32, {batch, channels, size, size}), y(pt::DType::kInt64, {batch});
  // One batch to warm the page cache and the threads, then batches until the time is up.
  if (pt::Status s = pt::gather_batch(*d, order, 0, 0, &x, &y); !s.is_ok()) {
    std::fprintf(stderr, "loader_bench: %s\n", s.message().c_str());
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t images = 0, epoch = 0;
  double elapsed = 0;
  for (int64_t at = batch; elapsed < seconds; at += batch) {
    if (pt::Status s = pt::gather_batch(*d, order, at, ++epoch, &x, &y); !s.is_ok()) {
      std::fprintf(stderr, "loader_bench: %s\n", s.message().c_str());
      return 1;
    }
    images += batch;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::printf("loader_bench: %s: %lld images of %dx%dx%d in %.2f s on %d thread%s%s: %.0f images/s\n", dir.c_str(),
              static_cast<long long>(images), channels, size, size, elapsed, threads, threads == 1 ? "" : "s",
              augment ? " (crop, flip)" : "", static_cast<double>(images) / elapsed);
  return 0;
}
