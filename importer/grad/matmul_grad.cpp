// MatMul (numpy semantics: 1-D promotion, batch broadcasting). 2-D cases use Gemm with transpose
// flags, and so does a batched A against a 2-D B (a Linear layer on [N, T, K] tokens): the batch
// folds into the rows, so dB is one GEMM over N*T rows instead of a per-token [N, T, K, N']
// product summed afterwards. Other batched cases MatMul against a Transpose, then sum away
// broadcast batch dimensions.
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

Value* swap_last_two(GradContext& c, Value* v) {
  const int64_t r = v->dims.size();
  std::vector<int64_t> perm(r);
  for (int64_t i = 0; i < r; ++i) perm[i] = i;
  std::swap(perm[r - 1], perm[r - 2]);
  Dims d = v->dims;
  std::swap(d[r - 1], d[r - 2]);
  AttrMap m;
  m.set("perm", perm);
  return c.emit("Transpose", {v}, d, m, v);
}

}  // namespace

Status matmul(GradContext& c) { return matmul_from(c, c.dy(0)); }

Status matmul_from(GradContext& c, Value* dy) {
  if (!dy) return Status::ok();
  Value* a = c.x(0);
  Value* b = c.x(1);
  Dims ad = a->dims, bd = b->dims;
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  Dims ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2), batch;
  broadcast_dims(ab, bb, &batch);
  Dims yd = batch;
  yd.push_back(ad[ad.size() - 2]);
  yd.push_back(bd.back());
  Value* ap = c.reshape(a, ad);
  Value* bp = c.reshape(b, bd);
  Value* dyp = c.reshape(dy, yd);
  if (ad.size() == 2 && bd.size() == 2) {
    auto attrs = [](int64_t ta, int64_t tb) {
      AttrMap m;
      m.set("transA", ta);
      m.set("transB", tb);
      return m;
    };
    if (c.needs(0)) c.set_dx(0, c.reshape(c.emit("Gemm", {dyp, bp}, ad, attrs(0, 1)), a->dims));
    if (c.needs(1)) c.set_dx(1, c.reshape(c.emit("Gemm", {ap, dyp}, bd, attrs(1, 0)), b->dims));
    return Status::ok();
  }
  if (bd.size() == 2 && b->dims.size() == 2) {
    // A [..., M, K] x B [K, N]: every batch entry uses the same B, so fold the batch into M.
    int64_t rows = ad[ad.size() - 2];
    for (int64_t d : batch) rows *= d;
    const int64_t k = ad.back(), n = bd.back();
    auto attrs = [](int64_t ta, int64_t tb) {
      AttrMap m;
      m.set("transA", ta);
      m.set("transB", tb);
      return m;
    };
    Value* dy2 = c.reshape(dyp, {rows, n});
    if (c.needs(0)) c.set_dx(0, c.reshape(c.emit("Gemm", {dy2, bp}, {rows, k}, attrs(0, 1)), a->dims));
    if (c.needs(1)) c.set_dx(1, c.emit("Gemm", {c.reshape(ap, {rows, k}), dy2}, {k, n}, attrs(1, 0)));
    return Status::ok();
  }
  if (c.needs(0)) {
    Dims full = batch;
    full.push_back(ad[ad.size() - 2]);
    full.push_back(ad.back());
    Value* g = c.emit("MatMul", {dyp, swap_last_two(c, bp)}, full);
    c.set_dx(0, c.reshape(c.reduce_to(g, ad), a->dims));
  }
  if (c.needs(1)) {
    Dims full = batch;
    full.push_back(bd[bd.size() - 2]);
    full.push_back(bd.back());
    Value* g = c.emit("MatMul", {swap_last_two(c, ap), dyp}, full);
    c.set_dx(1, c.reshape(c.reduce_to(g, bd), b->dims));
  }
  return Status::ok();
}

}  // namespace pt::grad
