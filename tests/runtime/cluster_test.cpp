// Launcher detection (runtime/dist/cluster.h): which environment variables name the rank, and the
// stable hash the start-up agreement compares across machines.
#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/dist/cluster.h"

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

}  // namespace
}  // namespace pt
