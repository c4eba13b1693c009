// Launcher detection and the parts of the cluster that need no MPI; with MPI, init() hands over
// to runtime/dist/mpi_cluster.cpp.
#include "runtime/dist/cluster.h"

#include <cstdlib>

namespace pt {

#if PIPETRAIN_HAVE_MPI
Expected<std::unique_ptr<Cluster>> make_mpi_cluster(int* argc, char*** argv, const LaunchEnv& env);
#endif

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end && *end == 0 && x >= 0 ? static_cast<int>(x) : -1;
}

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv e;
  struct Source {
    const char *rank, *size, *local_rank, *local_size, *name;
  };
  const Source sources[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "pmi"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "srun"},
  };
  for (const Source& s : sources) {
    const int rank = env_int(s.rank), size = env_int(s.size);
    if (rank < 0 || size < 1) continue;
    e.rank = rank;
    e.size = size;
    e.local_rank = env_int(s.local_rank);
    e.local_size = env_int(s.local_size);
    e.launcher = s.name;
    return e;
  }
  return e;
}

bool mpi_built() { return PIPETRAIN_HAVE_MPI != 0; }

Expected<std::unique_ptr<Cluster>> Cluster::init(int* argc, char*** argv) {
  const LaunchEnv env = detect_launch_env();
  if (env.size <= 1) return std::unique_ptr<Cluster>();
#if PIPETRAIN_HAVE_MPI
  return make_mpi_cluster(argc, argv, env);
#else
  return unsupported("launched as rank " + std::to_string(env.rank) + " of " + std::to_string(env.size) + " by " +
                     env.launcher + ", but this build has no MPI: rebuild with -DPIPETRAIN_MPI=ON (Debian: "
                     "libopenmpi-dev), or run one process with --gpus N for N in-process stages");
#endif
}

}  // namespace pt
