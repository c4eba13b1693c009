// NCCL send/recv between CUDA stages on different ranks: a Link whose messages go
// from the sender's device buffers to the receiver's without touching the host. Each link has a
// two-rank communicator of its own (the sender makes the unique id and sends it to the receiver
// over the cluster's control messages), so links between the same two ranks never have to match
// each other's order. NCCL is loaded with dlopen when the first link is made: the binary starts,
// and runs CPU stages or single-process CUDA pipelines, on machines without libnccl.so.2.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/dist/transport.h"

namespace pt {

class Cluster;
class Device;

// True when this build has the NCCL link (CUDA and MPI backends).
bool nccl_built();
// "" when libnccl.so.2 loads (PIPETRAIN_NCCL_LIBRARY names another file), else why not.
std::string nccl_unavailable_reason();

// A link for `values` from rank `from` to rank `to` (this rank is one of them) on `device`, the
// CUDA device of this rank's stage. Both ranks must make their links in the same order.
// `tag` tells the control message apart from those of this pair's other links.
Expected<std::unique_ptr<Link>> make_nccl_link(std::vector<const Value*> values, Cluster& cluster, int from, int to,
                                               int tag, std::shared_ptr<Device> device);

}  // namespace pt
