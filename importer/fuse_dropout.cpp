// Identity Dropouts: a Dropout whose ratio is 0 (PyTorch exports nn.Dropout(0.0) and the dropout
// arguments of nn.TransformerEncoderLayer set to 0 as training-mode Dropout nodes) or that is not in
// training mode passes its input through unchanged (mask all true, scale 1 / (1 - 0) = 1). Run as
// such it costs a copy forward and a DropoutGrad pass backward for nothing; the readers of its
// output read its input instead and the node goes (ONNX Runtime's training optimizer does the same).
// Kept: a Dropout whose output is a graph output, or whose mask output some node reads.
#include <algorithm>

#include "importer/fuse.h"

namespace pt {

int remove_identity_dropouts(Graph& g) {
  std::vector<bool> remove(g.nodes().size(), false);
  int removed = 0;
  auto is_output = [&g](const Value* v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
  for (const auto& up : g.nodes()) {
    Node* n = up.get();
    if (n->op_type != "Dropout" || !n->domain.empty() || n->inputs.empty() || !n->inputs[0] || n->outputs.empty()) continue;
    if (n->attrs.get_int("_training", 0) != 0 && n->attrs.get_float("ratio", 0.5f) != 0.0f) continue;
    Value* x = n->inputs[0];
    Value* y = n->outputs[0];
    if (!y || y->dtype != x->dtype || y->dims != x->dims || is_output(y)) continue;
    if (n->outputs.size() > 1 && n->outputs[1] && (!n->outputs[1]->consumers.empty() || is_output(n->outputs[1]))) continue;
    for (Node* c : y->consumers) {
      for (Value*& in : c->inputs)
        if (in == y) in = x;
      x->consumers.push_back(c);
    }
    y->consumers.clear();
    remove[n->id] = true;
    ++removed;
  }
  if (removed) g.remove_nodes(remove);
  return removed;
}

}  // namespace pt
