// SoftmaxCrossEntropyLoss (+Grad) with weights / ignore_index / every reduction, and MSELoss
// (+Grad): forward against naive references, backward against formulas and finite differences.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class LossTest : public KernelTest<T> {};
TYPED_TEST_SUITE(LossTest, FloatTypes);

struct SceConfig {
  Dims scores;             // [N, C, d...]
  bool weights = false;
  bool ignore = false;     // ignore_index attribute present
  int64_t ignore_index = -100;
  std::string reduction = "mean";
  bool log_prob_out = true;
};

std::string describe(const SceConfig& c) {
  return "scores=" + dims_str(c.scores) + " weights=" + std::to_string(c.weights) +
         " ignore=" + (c.ignore ? std::to_string(c.ignore_index) : std::string("none")) +
         " reduction=" + c.reduction + " log_prob_out=" + std::to_string(c.log_prob_out);
}

std::vector<SceConfig> sce_configs() {
  std::vector<SceConfig> out;
  for (const Dims& d : {Dims{6, 5}, Dims{3, 4, 2, 3}})
    for (const char* red : {"mean", "sum", "none"})
      for (int w = 0; w < 2; ++w)
        for (int ig = 0; ig < 3; ++ig) {
          SceConfig c;
          c.scores = d;
          c.reduction = red;
          c.weights = w;
          c.ignore = ig > 0;
          c.ignore_index = ig == 2 ? 1 : -100;  // 1 is also a valid class
          c.log_prob_out = (w + ig) % 2 == 0;
          out.push_back(c);
        }
  return out;
}

struct SceData {
  Dims label_dims;
  int64_t n, c, d;
  std::vector<double> scores;
  std::vector<int64_t> labels;
  std::vector<double> weights;
};

SceData make_sce_data(const SceConfig& cfg, uint32_t seed) {
  SceData s;
  s.n = cfg.scores[0];
  s.c = cfg.scores[1];
  s.d = 1;
  for (size_t i = 2; i < cfg.scores.size(); ++i) s.d *= cfg.scores[i];
  s.label_dims = cfg.scores;
  s.label_dims.erase(s.label_dims.begin() + 1);
  s.scores = random_values(numel(cfg.scores), seed, -3, 3);
  std::mt19937 rng(seed + 7);
  for (int64_t i = 0; i < s.n * s.d; ++i) s.labels.push_back(static_cast<int64_t>(rng() % s.c));
  if (cfg.ignore) {
    s.labels[0] = cfg.ignore_index;
    s.labels[s.labels.size() / 2] = cfg.ignore_index;
  } else {
    s.labels[1] = 1;  // class 1 present and counted when no ignore_index is set
  }
  s.weights = random_values(s.c, seed + 3, 0.2, 2.0);
  return s;
}

// Per-sample losses, the total weight, and log_prob.
void sce_ref(const SceConfig& cfg, const SceData& s, std::vector<double>* loss,
             std::vector<double>* logp, double* wsum, std::vector<double>* wi) {
  logp->assign(s.scores.size(), 0);
  for (int64_t nn = 0; nn < s.n; ++nn)
    for (int64_t dd = 0; dd < s.d; ++dd) {
      double mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c < s.c; ++c) mx = std::max(mx, s.scores[(nn * s.c + c) * s.d + dd]);
      for (int64_t c = 0; c < s.c; ++c) sum += std::exp(s.scores[(nn * s.c + c) * s.d + dd] - mx);
      for (int64_t c = 0; c < s.c; ++c)
        (*logp)[(nn * s.c + c) * s.d + dd] = s.scores[(nn * s.c + c) * s.d + dd] - mx - std::log(sum);
    }
  loss->assign(s.n * s.d, 0);
  wi->assign(s.n * s.d, 0);
  *wsum = 0;
  for (int64_t i = 0; i < s.n * s.d; ++i) {
    const int64_t l = s.labels[i];
    if (cfg.ignore && l == cfg.ignore_index) continue;
    (*wi)[i] = cfg.weights ? s.weights[l] : 1.0;
    *wsum += (*wi)[i];
    (*loss)[i] = -(*wi)[i] * (*logp)[((i / s.d) * s.c + l) * s.d + i % s.d];
  }
}

AttrMap sce_attrs(const SceConfig& cfg) {
  AttrMap a;
  a.set("reduction", cfg.reduction);
  if (cfg.ignore) a.set("ignore_index", cfg.ignore_index);
  return a;
}

Dims loss_dims(const SceConfig& cfg, const SceData& s) {
  return cfg.reduction == "none" ? s.label_dims : Dims{};
}

// Runs the forward op in T; fills loss and (when asked) log_prob.
template <typename T>
Status run_sce(const SceConfig& cfg, const SceData& s, const std::vector<double>& scores,
               Buf<T>* loss, Buf<T>* logp) {
  auto x = Buf<T>::from_doubles(cfg.scores, scores);
  auto labels = Buf<int64_t>(s.label_dims, s.labels);
  auto w = Buf<T>::from_doubles({s.c}, s.weights);
  std::vector<TensorView> in = {x.view(), labels.view()};
  if (cfg.weights) in.push_back(w.view());
  std::vector<TensorView> out = {loss->view()};
  if (logp) out.push_back(logp->view());
  return run_kernel("SoftmaxCrossEntropyLoss", dtype_of<T>(), in, out, sce_attrs(cfg));
}

TYPED_TEST(LossTest, SoftmaxCrossEntropyForwardAndGrad) {
  using T = TypeParam;
  uint32_t seed = 800;
  for (const SceConfig& cfg : sce_configs()) {
    ++seed;
    SCOPED_TRACE(seed_trace(seed) + " " + describe(cfg));
    const SceData s = make_sce_data(cfg, seed);
    auto x = Buf<T>::from_doubles(cfg.scores, s.scores);
    // The reference works from the T-rounded scores.
    SceData sr = s;
    sr.scores = x.values();
    for (auto& v : sr.weights) v = static_cast<double>(static_cast<T>(v));
    std::vector<double> li, lp, wi;
    double wsum;
    sce_ref(cfg, sr, &li, &lp, &wsum, &wi);

    auto loss = Buf<T>::output(loss_dims(cfg, s));
    auto logp = Buf<T>::output(cfg.scores);
    PT_ASSERT_OK(run_sce<T>(cfg, s, s.scores, &loss, cfg.log_prob_out ? &logp : nullptr));
    double total = 0;
    for (double v : li) total += v;
    if (cfg.reduction == "none") expect_close(loss, li, "loss");
    else expect_close(loss, {cfg.reduction == "sum" ? total : total / wsum}, "loss");
    if (!cfg.log_prob_out) {
      auto logp2 = Buf<T>::output(cfg.scores);  // grad needs log_prob: run again with it
      auto loss2 = Buf<T>::output(loss_dims(cfg, s));
      PT_ASSERT_OK(run_sce<T>(cfg, s, s.scores, &loss2, &logp2));
      logp = logp2;
    }
    expect_close(logp, lp, "log_prob");

    // Backward against (softmax - onehot) * w * scale.
    const int64_t ns = s.n * s.d;
    const std::vector<double> dl_vals =
        random_values(cfg.reduction == "none" ? ns : 1, seed + 5, 0.5, 1.5);
    auto dloss = Buf<T>::from_doubles(loss_dims(cfg, s), dl_vals);
    auto labels = Buf<int64_t>(s.label_dims, s.labels);
    auto w = Buf<T>::from_doubles({s.c}, s.weights);
    auto ds = Buf<T>::output(cfg.scores);
    std::vector<TensorView> in = {dloss.view(), logp.view(), labels.view()};
    if (cfg.weights) in.push_back(w.view());
    PT_ASSERT_OK(run_kernel("SoftmaxCrossEntropyLossGrad", dtype_of<T>(), in, {ds.view()}, sce_attrs(cfg)));
    std::vector<double> ref(lp.size(), 0.0);
    for (int64_t i = 0; i < ns; ++i) {
      if (wi[i] == 0) continue;
      const double dlv = static_cast<double>(dloss[cfg.reduction == "none" ? i : 0]);
      const double scale = cfg.reduction == "mean" ? dlv / wsum : dlv;
      const int64_t nn = i / s.d, dd = i % s.d;
      for (int64_t c = 0; c < s.c; ++c) {
        const int64_t k = (nn * s.c + c) * s.d + dd;
        ref[k] = (std::exp(static_cast<double>(logp[k])) - (c == s.labels[i] ? 1.0 : 0.0)) * wi[i] * scale;
      }
    }
    expect_close(ds, ref, "dScores");
  }
}

// The grad op against central differences of the forward op's loss (sum_i dLoss_i * loss_i for
// "none"), in double.
TEST(LossGradFD, SoftmaxCrossEntropy) {
  uint32_t seed = 900;
  for (const SceConfig& cfg : sce_configs()) {
    ++seed;
    SCOPED_TRACE(seed_trace(seed) + " " + describe(cfg));
    const SceData s = make_sce_data(cfg, seed);
    const Dims ld = loss_dims(cfg, s);
    const std::vector<double> dl = random_values(numel(ld), seed + 5, 0.5, 1.5);
    auto objective = [&](const std::vector<double>& scores) {
      auto loss = Buf<double>::output(ld);
      EXPECT_TRUE(run_sce<double>(cfg, s, scores, &loss, nullptr).is_ok());
      double v = 0;
      for (int64_t i = 0; i < loss.size(); ++i) v += dl[i] * loss[i];
      return v;
    };
    auto loss = Buf<double>::output(ld);
    auto logp = Buf<double>::output(cfg.scores);
    PT_ASSERT_OK(run_sce<double>(cfg, s, s.scores, &loss, &logp));
    auto dloss = Buf<double>(ld, dl);
    auto labels = Buf<int64_t>(s.label_dims, s.labels);
    auto w = Buf<double>({s.c}, s.weights);
    auto ds = Buf<double>::output(cfg.scores);
    std::vector<TensorView> in = {dloss.view(), logp.view(), labels.view()};
    if (cfg.weights) in.push_back(w.view());
    PT_ASSERT_OK(run_kernel("SoftmaxCrossEntropyLossGrad", DType::kFloat64, in, {ds.view()}, sce_attrs(cfg)));
    std::vector<double> fd(s.scores.size());
    const double eps = 1e-6;
    for (size_t i = 0; i < s.scores.size(); ++i) {
      std::vector<double> xp = s.scores, xm = s.scores;
      xp[i] += eps;
      xm[i] -= eps;
      fd[i] = (objective(xp) - objective(xm)) / (2 * eps);
    }
    expect_close(ds, fd, "dScores vs FD", 1e-8, 1e-6);
  }
}

TYPED_TEST(LossTest, SoftmaxCrossEntropyLabelOutOfRange) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({3, 4}, random_values(12, 1));
  auto labels = Buf<int64_t>({3}, {0, 3, 7});
  auto loss = Buf<T>::output({});
  AttrMap attrs;
  Status s = run_kernel("SoftmaxCrossEntropyLoss", dtype_of<T>(), {x.view(), labels.view()}, {loss.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  EXPECT_NE(s.message().find("label 7 at index 2"), std::string::npos) << s.message();
  // -100 is only special when ignore_index says so.
  auto labels2 = Buf<int64_t>({3}, {0, -100, 1});
  s = run_kernel("SoftmaxCrossEntropyLoss", dtype_of<T>(), {x.view(), labels2.view()}, {loss.view()}, attrs);
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  attrs.set("ignore_index", int64_t{-100});
  PT_EXPECT_OK(run_kernel("SoftmaxCrossEntropyLoss", dtype_of<T>(), {x.view(), labels2.view()}, {loss.view()}, attrs));
}

TYPED_TEST(LossTest, SoftmaxCrossEntropyInt32Labels) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({3, 4}, random_values(12, 1150));
  auto l64 = Buf<int64_t>({3}, {2, 0, 3});
  auto l32 = Buf<int32_t>({3}, {2, 0, 3});
  auto a = Buf<T>::output({}), b = Buf<T>::output({});
  PT_ASSERT_OK(run_kernel("SoftmaxCrossEntropyLoss", dtype_of<T>(), {x.view(), l64.view()}, {a.view()}));
  PT_ASSERT_OK(run_kernel("SoftmaxCrossEntropyLoss", dtype_of<T>(), {x.view(), l32.view()}, {b.view()}));
  expect_close(b, a.values(), "int32 labels", 0, 0);
}

TYPED_TEST(LossTest, MSELossAndGrad) {
  using T = TypeParam;
  uint32_t seed = 1000;
  for (const Dims& dims : {Dims{4, 7}, Dims{300, 150}, Dims{}})
    for (const char* red : {"mean", "sum"}) {
      ++seed;
      SCOPED_TRACE(seed_trace(seed) + " " + dims_str(dims) + " " + red);
      const int64_t n = numel(dims);
      auto p = Buf<T>::from_doubles(dims, random_values(n, seed));
      auto t = Buf<T>::from_doubles(dims, random_values(n, seed + 1));
      AttrMap attrs;
      attrs.set("reduction", std::string(red));
      auto loss = Buf<T>::output({});
      PT_ASSERT_OK(run_kernel("MSELoss", dtype_of<T>(), {p.view(), t.view()}, {loss.view()}, attrs));
      double ref = 0;
      for (int64_t i = 0; i < n; ++i) ref += (static_cast<double>(p[i]) - t[i]) * (static_cast<double>(p[i]) - t[i]);
      const bool mean = std::string(red) == "mean";
      if (mean) ref /= static_cast<double>(n);
      expect_close(loss, {ref}, "MSELoss");

      auto dl = Buf<T>({}, {T(0.75)});
      auto dp = Buf<T>::output(dims);
      PT_ASSERT_OK(run_kernel("MSELossGrad", dtype_of<T>(), {dl.view(), p.view(), t.view()}, {dp.view()}, attrs));
      std::vector<double> gref(n);
      for (int64_t i = 0; i < n; ++i)
        gref[i] = 0.75 * 2 * (static_cast<double>(p[i]) - t[i]) / (mean ? static_cast<double>(n) : 1.0);
      expect_close(dp, gref, "MSELossGrad");
    }
}

TEST(LossGradFD, MSE) {
  const Dims dims{3, 5};
  const int64_t n = 15;
  for (const char* red : {"mean", "sum"}) {
    AttrMap attrs;
    attrs.set("reduction", std::string(red));
    const auto pv = random_values(n, 1100), tv = random_values(n, 1101);
    auto t = Buf<double>(dims, tv);
    auto f = [&](const std::vector<double>& v) {
      auto p = Buf<double>(dims, v);
      auto loss = Buf<double>::output({});
      EXPECT_TRUE(run_kernel("MSELoss", DType::kFloat64, {p.view(), t.view()}, {loss.view()}, attrs).is_ok());
      return 1.25 * loss[0];
    };
    auto p = Buf<double>(dims, pv);
    auto dl = Buf<double>({}, {1.25});
    auto dp = Buf<double>::output(dims);
    PT_ASSERT_OK(run_kernel("MSELossGrad", DType::kFloat64, {dl.view(), p.view(), t.view()}, {dp.view()}, attrs));
    std::vector<double> fd(n);
    for (int64_t i = 0; i < n; ++i) {
      auto a = pv, b = pv;
      a[i] += 1e-6;
      b[i] -= 1e-6;
      fd[i] = (f(a) - f(b)) / 2e-6;
    }
    expect_close(dp, fd, std::string("MSELossGrad vs FD ") + red, 1e-8, 1e-6);
  }
}

}  // namespace
}  // namespace pt::test
