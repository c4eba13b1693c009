// The all-reduce the hybrid cost model charges (partition.h, allreduce_ms), measured: MPI_Allreduce
// (sum of floats) of a few sizes across the ranks of `mpirun -np R`, each size validated before
// it is timed; then the ring model's link (bandwidth, latency) fitted to the times, and the
// built-in link's prediction beside each measurement as a ratio.
// Usage: mpirun -np R allreduce_bench [--link host] [--max-mb 64] [--reps 20]
#define OMPI_SKIP_MPICXX 1  // the C API only (no libmpi_cxx)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "partitioner/device_spec.h"
#include "partitioner/partition.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string link_name = "host";
  double max_mb = 64;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--link")) link_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--max-mb")) max_mb = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::max(3, std::atoi(argv[i + 1]));
  }
  auto link = pt::builtin_link_spec(link_name);
  if (!link) {
    if (rank == 0) std::fprintf(stderr, "allreduce_bench: %s\n", link.status().message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  std::vector<double> sizes;  // bytes
  for (double b = 4096; b <= max_mb * 1e6 * 1.0001; b *= 4) sizes.push_back(b);
  if (rank == 0) {
    std::printf("MPI_Allreduce (float sum) across %d ranks, median of %d; model: ring over '%s' (%.1f GB/s, %.1f us)\n",
                size, reps, link->name.c_str(), link->bandwidth / 1e9, link->latency_s * 1e6);
    std::printf("%12s %12s %14s %14s %12s\n", "bytes", "measured ms", "busbw GB/s", "model ms", "model/meas");
  }
  std::vector<double> xs, ts;  // ring factor x bytes, measured seconds
  for (double bytes : sizes) {
    const size_t n = static_cast<size_t>(bytes / 4);
    std::vector<float> in(n, static_cast<float>(rank + 1)), out(n, 0.f);
    // Validate: every element is 1 + 2 + ... + size.
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const float want = static_cast<float>(size) * (size + 1) / 2;
    int bad = 0;
    for (size_t i = 0; i < n; ++i) bad += out[i] != want;
    int any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (any_bad) {
      if (rank == 0) std::fprintf(stderr, "allreduce_bench: wrong sum at %.0f bytes\n", bytes);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0, worst = 0;
      MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank's
      times.push_back(worst);
    }
    const double t = median(times);
    const double ring = 2.0 * (size - 1) / size;
    xs.push_back(ring * bytes);
    ts.push_back(t);
    const double model = pt::allreduce_ms(bytes, size, *link);
    if (rank == 0)
      std::printf("%12.0f %12.4f %14.2f %14.4f %12.2f\n", bytes, 1e3 * t, ring * bytes / t / 1e9, model,
                  model / (1e3 * t));
  }
  if (rank == 0 && xs.size() >= 2 && size > 1) {
    // Least squares t = x / bandwidth + 2 latency.
    double mx = 0, mt = 0;
    for (size_t i = 0; i < xs.size(); ++i) mx += xs[i], mt += ts[i];
    mx /= xs.size();
    mt /= ts.size();
    double sxx = 0, sxt = 0;
    for (size_t i = 0; i < xs.size(); ++i) sxx += (xs[i] - mx) * (xs[i] - mx), sxt += (xs[i] - mx) * (ts[i] - mt);
    const double slope = sxt / sxx, icpt = mt - slope * mx;
    std::printf("fitted ring link: %.2f GB/s, %.1f us per step (2 (R-1) = %d steps)\n", 1 / slope / 1e9,
                1e6 * icpt / (2.0 * (size - 1)), 2 * (size - 1));
  }
  MPI_Finalize();
  return 0;
}
