// The cost model: per forward node, forward and backward time on a device (roofline: the larger
// of flops / peak and bytes / bandwidth, plus a per-kernel overhead), the bytes it keeps for
// backward, and its parameters. Backward nodes are charged to the forward node they serve.
// Measured profiles (--profile) replace the analytic times node by node.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "importer/ir.h"
#include "partitioner/device_spec.h"

namespace pt {

struct NodeCost {
  double fwd_s = 0;
  double bwd_s = 0;             // all backward nodes serving this node
  double update_s = 0;          // optimizer update of the parameters it reads first
  double fwd_flops = 0, bwd_flops = 0;
  int64_t param_bytes = 0;      // parameters first read by this node
  int64_t param_count = 0;
  // Activations kept from forward until backward (per mini-batch): this node's outputs that some
  // backward node reads (and loader-fed inputs, charged to their first consumer), not every output.
  int64_t saved_bytes = 0;
  // Transient buffers: unsaved outputs, backward intermediates other than parameter gradients,
  // one image's im2col buffer for Conv.
  int64_t workspace_bytes = 0;
};

// Multiply-adds count as 2 FLOPs; elementwise ops as one FLOP per output element.
double node_flops(const Node& n);
// Bytes read and written by a node (inputs + outputs; in-place optimizer steps also count the
// state they write back).
double node_bytes(const Node& n);
// Roofline time of one node on `d`: max(flops / peak, bytes / bandwidth) + kernel overhead; on a
// calibrated device, its class's floor + scale x flops / peak + byte_scale x bytes / bandwidth.
// Times `d.share` when stages share the device.
double node_time_s(const Node& n, const DeviceSpec& d);
// One element-wise pass over a weight outside the graph (a pipeline stage writing a version of it:
// SpecTrain's prediction, a stashed copy) moving `bytes` with `flops`, priced as an update node of
// the element-wise class (node_time_s's rule).
double weight_pass_s(double flops, double bytes, const DeviceSpec& d);
// The roofline's two terms on `d` (0 where the device's rate is unknown), and the roofline alone:
// max(flops / peak, bytes / bandwidth).
struct RooflineTerms {
  double flops_s = 0, bytes_s = 0;
};
RooflineTerms roofline_terms(const Node& n, const DeviceSpec& d);
double roofline_s(const Node& n, const DeviceSpec& d);
// The class a node's speed is calibrated by: a backward node the class of what it computes (a
// ConvGradWeight its convolution's, dense or depthwise; a ReluGrad or GeluGrad element-wise, also
// behind a fused product; a bias gradient's ReduceSumToShape a reduction's).
OpClass op_class(const Node& n);
// Bytes of a value as the cost model counts them (unknown dims count as 1, unknown dtype as 4 B).
double cost_value_bytes(const Value* v);
// Forward and loss nodes define stages; backward and update nodes follow them.
bool is_forward_phase(const Node& n);
// Which of a class's calibrated costs prices the node (DeviceSpec::classes): 0 forward and loss,
// 1 backward and update, 2 a convolution's weight gradient.
int cost_phase(const Node& n);
// Values backward may keep from forward: activations of forward / loss nodes, model inputs, labels.
bool may_be_kept_for_backward(const Value* v);

// Measured seconds per node name, forward and backward (from --profile).
struct Profile {
  std::map<std::string, double> fwd_s, bwd_s;
};

// Costs of every forward-phase and loss-phase node of a training graph, in graph order, with the
// backward and update nodes that serve it folded in. `profile` may be null.
std::vector<std::pair<const Node*, NodeCost>> node_costs(const Graph& g, const DeviceSpec& d,
                                                         const Profile* profile = nullptr);

}  // namespace pt
