// Launcher detection (runtime/dist/cluster.h): which environment variables name the rank, and the
// stable hash the start-up agreement compares across machines; a link's hand-off statistics.
#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/dist/cluster.h"
#include "runtime/dist/transport.h"

namespace pt {
namespace {

class EnvGuard {
 public:
  explicit EnvGuard(std::initializer_list<const char*> names) : names_(names) {
    for (const char* n : names_) unsetenv(n);
  }
  ~EnvGuard() {
    for (const char* n : names_) unsetenv(n);
  }

 private:
  std::vector<const char*> names_;
};

const std::initializer_list<const char*> kVars = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",             "PMI_SIZE",             "SLURM_PROCID",               "SLURM_NTASKS",
    "SLURM_LOCALID"};

TEST(Cluster, SingleProcessWithoutLauncher) {
  EnvGuard g(kVars);
  const LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.size, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.launcher, "");
  int argc = 0;
  char** argv = nullptr;
  auto c = Cluster::init(&argc, &argv);
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->get(), nullptr);  // no MPI_Init for a single process
}

TEST(Cluster, OpenMpiBeforeSlurm) {
  EnvGuard g(kVars);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  const LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.local_size, 2);
}

TEST(Cluster, Slurm) {
  EnvGuard g(kVars);
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "1", 1);
  const LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
}

TEST(Cluster, WithoutMpiAMultiRankLaunchIsRefused) {
  if (mpi_built()) GTEST_SKIP() << "this build has MPI (mpi_tests launch it)";
  EnvGuard g(kVars);
  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "2", 1);
  int argc = 0;
  char** argv = nullptr;
  auto c = Cluster::init(&argc, &argv);
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("this build has no MPI"), std::string::npos);
  EXPECT_EQ(exit_code_for(c.status()), 2);
}

TEST(Cluster, Fnv1aIsStable) {
  EXPECT_EQ(fnv1a64(""), 14695981039346656037ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
}


// A link's hand-off times (Link::Handoffs): the mean from the sums, the median from bins of a
// quarter octave (within 10 % of the true median), sums and differences bin by bin (a stage's
// steady-state window is the difference of two of them).
TEST(LinkHandoffs, MedianWithinTenPercentAndWindowsSubtract) {
  Link::Handoffs h;
  EXPECT_EQ(h.median_us(), 0);
  // 9 messages of 100 us and one of 50 ms: the median stays at 100 us, the mean does not.
  for (int i = 0; i < 9; ++i) h.add(100e-6);
  h.add(50e-3);
  EXPECT_EQ(h.count, 10);
  EXPECT_NEAR(1e6 * h.seconds / static_cast<double>(h.count), 5090, 1e-6);
  EXPECT_NEAR(h.median_us(), 100, 10);
  for (double us : {0.3, 1.0, 7.0, 42.0, 999.0, 123456.0, 9e9}) {
    Link::Handoffs one;
    one.add(us * 1e-6);
    const double m = one.median_us();
    if (us >= 1 && us < 1e7) {
      EXPECT_NEAR(m / us, 1.0, 0.1) << us;  // the last bin holds everything above 2^24 us
    } else {
      EXPECT_GT(m, 0) << us;
    }
  }
  Link::Handoffs later = h;
  for (int i = 0; i < 30; ++i) later.add(2e-3);
  later -= h;  // only the 30 messages of 2 ms
  EXPECT_EQ(later.count, 30);
  EXPECT_NEAR(later.seconds, 60e-3, 1e-12);
  EXPECT_NEAR(later.median_us(), 2000, 200);
  later += h;
  EXPECT_EQ(later.count, 40);
  EXPECT_EQ(later.bins, [&] {
    Link::Handoffs x = h;
    for (int i = 0; i < 30; ++i) x.add(2e-3);
    return x.bins;
  }());
}

}  // namespace
}  // namespace pt
