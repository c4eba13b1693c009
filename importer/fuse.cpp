// The fusion passes' switchboard: which run (ImportOptions::fuse, --no-fusion) and in what order.
#include "importer/fuse.h"

#include <set>

namespace pt {

Status disable_fusions(const std::vector<std::string>& names, FuseOptions* o) {
  for (const std::string& n : names) {
    if (n == "all") {
      *o = FuseOptions{};
      o->layernorm = false;
      o->attention = false;
      o->gelu = false;
      o->dropout = false;
      o->epilogue = false;
      o->update = false;
    } else if (n == "layernorm") {
      o->layernorm = false;
    } else if (n == "attention") {
      o->attention = false;
    } else if (n == "gelu") {
      o->gelu = false;
    } else if (n == "dropout") {
      o->dropout = false;
    } else if (n == "epilogue") {
      o->epilogue = false;
    } else if (n == "update") {
      o->update = false;
    } else {
      return invalid_input("--no-fusion: unknown pass '" + n + "' (known: layernorm, attention, gelu, dropout, epilogue, update, all)");
    }
  }
  return Status::ok();
}

bool is_fusion_op(const std::string& op) {
  return op == "FusedAttention" || op == "FusedAttentionGrad" || op == "FusedMatMul" || op == "FusedGemm" ||
         op == "FusedConv";
}

FuseReport apply_fusions(Graph& g, const FuseOptions& o) {
  auto read_constants = [&g] {
    std::set<const Value*> s;
    for (const Value* v : g.values_of_kind(ValueKind::kConstant))
      if (v->from_initializer && is_floating(v->dtype) && !v->consumers.empty()) s.insert(v);
    return s;
  };
  const std::set<const Value*> before = read_constants();
  FuseReport r;
  // First: an identity Dropout between two ops would hide a pattern of the others.
  if (o.dropout) r.dropout = remove_identity_dropouts(g);
  if (o.layernorm) r.layernorm = fuse_layernorm(g);
  if (o.attention) r.attention = fuse_attention(g, o.attention_dropout);
  if (o.gelu) r.gelu = fuse_gelu(g);
  // Last: the GELU pass's Gelu is an epilogue of the product before it.
  if (o.epilogue) r.epilogue = fuse_epilogues(g, o.keep);
  r.rewrites = r.layernorm + r.attention + r.gelu + r.dropout + r.epilogue;
  if (r.rewrites) {
    const std::string broken = g.broken_link();
    PT_CHECK(broken.empty()) << "a fusion pass left a broken link: " << broken;
  }
  r.absorbed_constants = static_cast<int>(before.size() - read_constants().size());
  return r;
}

}  // namespace pt
