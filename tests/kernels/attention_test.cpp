// FusedAttention and FusedAttentionGrad (kernels/cpu/attention.cpp) against a naive double
// reference that materialises the [T, S] probabilities (float and double, guard elements): no mask,
// an additive mask broadcast over heads, a bool fill mask (causal, one query row fully masked), a
// non-square T != S with Dk != Dv; and refused calls.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

struct AttnCase {
  Dims batch;
  int64_t t, s, dk, dv;
  int64_t mask_kind;  // 0 none, 1 add, 2 fill
  Dims mask_dims;
  float scale;
};

struct Ref {
  std::vector<double> y, inv, dq, dk, dv;
};

// softmax(scale * Q Kt (+ mask)) V and its gradients, all in double, probabilities kept.
Ref reference(const AttnCase& c, const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
              const std::vector<double>& m, const std::vector<double>& dy) {
  const int64_t H = numel(c.batch), T = c.t, S = c.s, Dk = c.dk, Dv = c.dv;
  Dims scores = c.batch;
  scores.push_back(T);
  scores.push_back(S);
  Ref r;
  r.y.assign(H * T * Dv, 0);
  r.inv.assign(H * T, 0);
  r.dq.assign(H * T * Dk, 0);
  r.dk.assign(H * Dk * S, 0);
  r.dv.assign(H * S * Dv, 0);
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> p(T * S), dp(T * S), ds(T * S);
    std::vector<bool> filled(T * S, false);
    for (int64_t i = 0; i < T; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double sc = 0;
        for (int64_t d = 0; d < Dk; ++d) sc += q[(h * T + i) * Dk + d] * k[(h * Dk + d) * S + j];
        sc *= static_cast<double>(c.scale);
        if (c.mask_kind) {
          const double mv = m[broadcast_source(c.mask_dims, scores, (h * T + i) * S + j)];
          if (c.mask_kind == 1)
            sc += mv;
          else if (mv != 0) {
            sc = -1e9;
            filled[i * S + j] = true;
          }
        }
        p[i * S + j] = sc;
        mx = std::max(mx, sc);
      }
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) sum += std::exp(p[i * S + j] - mx);
      r.inv[h * T + i] = 1 / sum;
      for (int64_t j = 0; j < S; ++j) p[i * S + j] = std::exp(p[i * S + j] - mx) / sum;
      for (int64_t e = 0; e < Dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += p[i * S + j] * v[(h * S + j) * Dv + e];
        r.y[(h * T + i) * Dv + e] = acc;
      }
    }
    for (int64_t i = 0; i < T; ++i) {
      double dot = 0;
      for (int64_t j = 0; j < S; ++j) {
        double acc = 0;
        for (int64_t e = 0; e < Dv; ++e) acc += dy[(h * T + i) * Dv + e] * v[(h * S + j) * Dv + e];
        dp[i * S + j] = acc;
        dot += acc * p[i * S + j];
      }
      for (int64_t j = 0; j < S; ++j)
        ds[i * S + j] = filled[i * S + j] ? 0 : p[i * S + j] * (dp[i * S + j] - dot) * static_cast<double>(c.scale);
    }
    for (int64_t j = 0; j < S; ++j)
      for (int64_t e = 0; e < Dv; ++e) {
        double acc = 0;
        for (int64_t i = 0; i < T; ++i) acc += p[i * S + j] * dy[(h * T + i) * Dv + e];
        r.dv[(h * S + j) * Dv + e] = acc;
      }
    for (int64_t i = 0; i < T; ++i)
      for (int64_t d = 0; d < Dk; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += ds[i * S + j] * k[(h * Dk + d) * S + j];
        r.dq[(h * T + i) * Dk + d] = acc;
      }
    for (int64_t d = 0; d < Dk; ++d)
      for (int64_t j = 0; j < S; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < T; ++i) acc += q[(h * T + i) * Dk + d] * ds[i * S + j];
        r.dk[(h * Dk + d) * S + j] = acc;
      }
  }
  return r;
}

Dims with(Dims d, std::initializer_list<int64_t> tail) {
  d.insert(d.end(), tail);
  return d;
}

template <typename T>
class AttentionTest : public KernelTest<T> {};
TYPED_TEST_SUITE(AttentionTest, FloatTypes);

TYPED_TEST(AttentionTest, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  const AttnCase cases[] = {
      {{2, 3}, 5, 5, 4, 4, 0, {}, 0.5f},
      {{2, 3}, 4, 6, 3, 5, 1, {2, 1, 1, 6}, 0.577f},  // a padding-style mask over keys, per batch
      {{3}, 6, 6, 4, 2, 2, {6, 6}, 0.25f},            // causal fill mask, shared by every head
      {{2}, 3, 4, 2, 3, 2, {2, 3, 4}, 1.0f},          // per-head fill mask with a fully masked row
      {{}, 7, 3, 5, 4, 1, {7, 3}, 2.0f},              // no batch dims
      // Heads wide enough for the register-blocked products (small_gemm.h: 16-column blocks, their
      // 4-row blocks and the remainders of both).
      {{2, 2}, 21, 35, 18, 20, 2, {21, 35}, 0.25f},
      {{3}, 32, 32, 16, 16, 0, {}, 0.25f},
  };
  uint32_t seed = 900;
  for (const AttnCase& c : cases) {
    SCOPED_TRACE("batch " + dims_str(c.batch) + " T " + std::to_string(c.t) + " S " + std::to_string(c.s) + " mask_kind " +
                 std::to_string(c.mask_kind) + " " + seed_trace(seed));
    const int64_t H = numel(c.batch);
    const Dims qd = with(c.batch, {c.t, c.dk}), kd = with(c.batch, {c.dk, c.s}), vd = with(c.batch, {c.s, c.dv});
    const Dims yd = with(c.batch, {c.t, c.dv}), ld = with(c.batch, {c.t});
    const std::vector<double> q = random_values(H * c.t * c.dk, seed++, -2, 2);
    const std::vector<double> k = random_values(H * c.dk * c.s, seed++, -2, 2);
    const std::vector<double> v = random_values(H * c.s * c.dv, seed++);
    const std::vector<double> dyv = random_values(H * c.t * c.dv, seed++);
    std::vector<double> m;
    if (c.mask_kind == 1) m = random_values(numel(c.mask_dims), seed++, -3, 0);
    if (c.mask_kind == 2) {
      m.assign(numel(c.mask_dims), 0);
      const int64_t rows = numel(c.mask_dims) / c.s;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c.s; ++j) m[r * c.s + j] = j > r % c.t ? 1 : 0;  // future keys
      if (c.mask_dims.size() == 3)
        for (int64_t j = 0; j < c.s; ++j) m[j] = 1;  // head 0's first query sees no key at all
    }
    const Ref ref = reference(c, q, k, v, m, dyv);
    auto bq = Buf<T>::from_doubles(qd, q), bk = Buf<T>::from_doubles(kd, k), bv = Buf<T>::from_doubles(vd, v);
    auto dy = Buf<T>::from_doubles(yd, dyv);
    auto fm = Buf<T>::from_doubles(c.mask_dims, c.mask_kind == 1 ? m : std::vector<double>(numel(c.mask_dims), 0));
    std::vector<bool> mb(m.begin(), m.end());
    std::vector<uint8_t> mbytes(m.size() + kGuard);
    for (size_t i = 0; i < m.size(); ++i) mbytes[i] = m[i] != 0;
    TensorView bool_mask{mbytes.data(), DType::kBool, c.mask_dims};
    std::vector<TensorView> ins = {bq.view(), bk.view(), bv.view()};
    if (c.mask_kind == 1) ins.push_back(fm.view());
    if (c.mask_kind == 2) ins.push_back(bool_mask);
    AttrMap at;
    at.set("scale", c.scale);
    at.set("mask_kind", c.mask_kind);
    at.set("mask_fill", -1e9f);
    auto y = Buf<T>::output(yd);
    auto lse = Buf<T>::output(ld);
    PT_ASSERT_OK(run_kernel("FusedAttention", dtype_of<T>(), ins, {y.view(), lse.view()}, at));
    const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-11;
    expect_close(y, ref.y, "Y", tol, tol);
    expect_close(lse, ref.inv, "InvSum", tol, tol);
    auto y1 = Buf<T>::output(yd);  // without the InvSum output
    PT_ASSERT_OK(run_kernel("FusedAttention", dtype_of<T>(), ins, {y1.view()}, at));
    expect_close(y1, ref.y, "Y alone", tol, tol);

    std::vector<TensorView> gins = {dy.view(), bq.view(), bk.view(), bv.view(), c.mask_kind ? ins[3] : TensorView{}, lse.view()};
    auto dq = Buf<T>::output(qd), dk = Buf<T>::output(kd), dv = Buf<T>::output(vd);
    PT_ASSERT_OK(run_kernel("FusedAttentionGrad", dtype_of<T>(), gins, {dq.view(), dk.view(), dv.view()}, at));
    expect_close(dq, ref.dq, "dQ", tol * 5, tol * 5);
    expect_close(dk, ref.dk, "dKt", tol * 5, tol * 5);
    expect_close(dv, ref.dv, "dV", tol * 5, tol * 5);
    // Only dV wanted: the other outputs absent.
    auto dv2 = Buf<T>::output(vd);
    PT_ASSERT_OK(run_kernel("FusedAttentionGrad", dtype_of<T>(), gins, {TensorView{}, TensorView{}, dv2.view()}, at));
    expect_close(dv2, ref.dv, "dV alone", tol * 5, tol * 5);
  }
}

TEST(AttentionKernel, RefusesInconsistentCalls) {
  auto q = Buf<float>::output({2, 3, 4}), k = Buf<float>::output({2, 4, 5}), v = Buf<float>::output({2, 5, 6});
  auto y = Buf<float>::output({2, 3, 6});
  AttrMap at;
  auto kbad = Buf<float>::output({2, 3, 5});
  Status st = run_kernel("FusedAttention", DType::kFloat32, {q.view(), kbad.view(), v.view()}, {y.view()}, at);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("do not chain"), std::string::npos) << st.message();
  auto mask = Buf<float>::output({3, 3});
  at.set("mask_kind", int64_t{1});
  st = run_kernel("FusedAttention", DType::kFloat32, {q.view(), k.view(), v.view(), mask.view()}, {y.view()}, at);
  EXPECT_NE(st.message().find("does not broadcast to the scores [2, 3, 5]"), std::string::npos) << st.message();
  st = run_kernel("FusedAttention", DType::kFloat32, {q.view(), k.view(), v.view()}, {y.view()}, at);
  EXPECT_NE(st.message().find("mask_kind 1 without a mask input"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace pt::test
