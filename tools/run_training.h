// The library entry point of one training run: everything the command line does after parsing
// its flags, for any program that has a TrainingSpec (tools/training_spec.h).
#pragma once

#include "tools/mpi_job.h"
#include "tools/training_spec.h"

namespace pt {

// Imports spec.model, builds the training graph, plans and writes the partition reports into the
// run folder, reads the data (rank 0 of a job alone), agrees with the other ranks of `job` on the
// model file, the whole spec and the plan, trains on one stage (Trainer) or a pipeline
// (PipelineTrainer; in a job one stage per rank), and writes <stem>.trained.onnx, metrics.csv,
// curves.svg, checkpoints and the reports with what was measured. Prints progress on stdout
// unless spec.local.quiet, and errors on stderr (one line). Returns the exit code: 0 done, 1
// internal error, 2 bad input, 3 diverged (no model written; the last good checkpoint kept),
// 130 stopped by a signal (checkpoint and model written).
int run_training(const TrainingSpec& spec, MpiJob& job);

}  // namespace pt
