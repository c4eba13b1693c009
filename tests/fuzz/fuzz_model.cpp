// Fuzz target: model bytes -> import (checker, version conversion, shape inference, folding) ->
// training graph -> plan on two stages. Every step may refuse the input with a Status; none may
// crash, hang or allocate what the file cannot justify.
#include <cstdint>

#include "importer/importer.h"
#include "importer/training.h"
#include "partitioner/device_spec.h"
#include "partitioner/partition.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = pt::fuzz::write_file("model.onnx", data, size);
  pt::ImportOptions io;
  io.batch_size = 2;
  auto m = pt::import_onnx(path, io);
  if (!m) return 0;
  pt::Graph& g = *m->graph;
  auto tg = pt::build_training_graph(g, pt::LossKind::kAuto, pt::SgdOptions{});
  if (!tg) return 0;
  pt::PartitionOptions po;
  static const pt::DeviceSpec h100 = pt::builtin_device_spec("H100").value();
  po.devices = {h100, h100};
  po.link = pt::builtin_link_spec("pcie4").value();
  (void)pt::partition(g, po);
  return 0;
}
