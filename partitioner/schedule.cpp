// Schedule generators, the program walker, the structural check and the file form.
#include "partitioner/schedule.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <sstream>

#include "core/file.h"

namespace pt {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kGPipe: return "gpipe";
    case Schedule::kZBH1: return "zb-h1";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZBV: return "zbv";
    case Schedule::kAuto: return "auto";
  }
  return "?";
}

const char* weight_mode_name(WeightMode w) {
  switch (w) {
    case WeightMode::kSpecTrain: return "spectrain";
    case WeightMode::kStash: return "stash";
    case WeightMode::kStale: return "stale";
    case WeightMode::kSync: return "sync";
    case WeightMode::k2BW: return "2bw";
    case WeightMode::k2BWPredict: return "2bw-predict";
  }
  return "?";
}

std::string action_token(const Action& a) {
  static const char kLetter[] = {'F', 'B', 'I', 'W', 'U'};
  std::string t(1, kLetter[static_cast<int>(a.kind)]);
  if (a.kind != ActionKind::kUpdate) t += std::to_string(a.micro);
  if (a.offset != 0) t.append(a.offset > 0 ? "+" : "").append(std::to_string(a.offset));
  if (a.chunk != 0) t.append("@").append(std::to_string(a.chunk));
  return t;
}

StageProgram ScheduleIR::chunk_program(int v) const {
  const int d = device_of(v), c = chunk_of(v);
  StageProgram out;
  for (const auto& [from, to] : {std::pair{&stages.at(d).warmup, &out.warmup}, {&stages.at(d).steady, &out.steady}})
    for (Action a : *from)
      if (a.chunk == c) {
        a.chunk = 0;
        to->push_back(a);
      }
  return out;
}

bool ScheduleIR::splits_backward() const {
  for (const StageProgram& p : stages)
    for (const auto* part : {&p.warmup, &p.steady})
      for (const Action& a : *part)
        if (a.kind == ActionKind::kInputGrad || a.kind == ActionKind::kWeightGrad) return true;
  return false;
}

namespace {

Action act(ActionKind k, int micro, int offset = 0) { return Action{k, micro, offset}; }

// Asynchronous 1F1B: N-k-1 forwards ahead, then one forward, one backward and its update.
StageProgram one_f_one_b_async(int k, int N) {
  StageProgram p;
  const int warm = N - k - 1;
  for (int i = 0; i < warm; ++i) p.warmup.push_back(act(ActionKind::kForward, 0, i));
  p.steady = {act(ActionKind::kForward, 0, warm), act(ActionKind::kBackward, 0), act(ActionKind::kUpdate, 0)};
  return p;
}

// PipeDream-2BW: asynchronous 1F1B over the stream of micro-batches (N-k-1 forwards ahead, across
// mini-batch boundaries: an F of the next mini-batch carries offset +1), the update after each
// mini-batch's last backward.
StageProgram two_bw(int k, int N, int M) {
  StageProgram p;
  const int warm = N - k - 1;
  for (int q = 0; q < warm; ++q) p.warmup.push_back(act(ActionKind::kForward, q % M, q / M));
  for (int j = 0; j < M; ++j) {
    const int q = j + warm;
    p.steady.push_back(act(ActionKind::kForward, q % M, q / M));
    p.steady.push_back(act(ActionKind::kBackward, j));
  }
  p.steady.push_back(act(ActionKind::kUpdate, 0));
  return p;
}

StageProgram gpipe(int M) {
  StageProgram p;
  for (int j = 0; j < M; ++j) p.steady.push_back(act(ActionKind::kForward, j));
  for (int j = 0; j < M; ++j) p.steady.push_back(act(ActionKind::kBackward, j));
  p.steady.push_back(act(ActionKind::kUpdate, 0));
  return p;
}

// Synchronous 1F1B (PipeDream-Flush): min(N-k-1, M) forwards ahead, then forward and backward in
// turn, the remaining backwards, one update.
StageProgram one_f_one_b_sync(int k, int N, int M) {
  StageProgram p;
  const int warm = std::min(N - k - 1, M);
  for (int j = 0; j < warm; ++j) p.steady.push_back(act(ActionKind::kForward, j));
  for (int j = 0; j + warm < M; ++j) {
    p.steady.push_back(act(ActionKind::kForward, j + warm));
    p.steady.push_back(act(ActionKind::kBackward, j));
  }
  for (int j = std::max(0, M - warm); j < M; ++j) p.steady.push_back(act(ActionKind::kBackward, j));
  p.steady.push_back(act(ActionKind::kUpdate, 0));
  return p;
}

// ZB-H1 and ZB-V (Qi et al., 2024): the order a greedy list scheduler gives, over D devices with V
// chunks each (ZB-H1: V = 1; ZB-V: V = 2 in a V). A device runs an I as soon as one of its chunks
// has its gradient (the critical path back up the pipeline; the earliest ready first), else an F
// (the deepest chunk's first, which brings a micro-batch to the loss soonest) while its passes
// waiting for their I stay under the cap, else a deferred W, which so fills the time 1F1B spends
// waiting. Caps: ZB-H1's stage k keeps fewer than N-k passes before their I (1F1B's activations in
// flight) and at most N waiting for their W (the reference implementation's cap on pending
// weight gradients); a ZB-V device starts a new micro-batch on its first chunk while fewer than 2N
// chunk passes (N stages' worth) wait for their I, and keeps at most 2N waiting for their W.
// Without `times` every F, I and W takes one unit; with them (milliseconds of virtual stage v's
// F, I and W), the order fits those times, as the reference's automatic scheduler does with
// profiled ones. Either way the order is a function of its inputs only, so every rank derives the
// same program from the same plan.
std::vector<StageProgram> zero_bubble(int D, int V, bool v_shape, int M, const std::vector<PassTimes>* times) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const int S = D * V;
  auto vs = [&](int d, int c) { return v_shape && c % 2 == 1 ? (c + 1) * D - 1 - d : c * D + d; };
  auto dur = [&](int v, int what) {  // 0 F, 1 I, 2 W
    if (!times || static_cast<int>(times->size()) != S) return 1.0;
    const double x = (*times)[v][what];
    return std::isfinite(x) && x > 0 ? x : 1e-9;
  };
  std::vector<StageProgram> out(D);
  std::vector<int> next_f(S, 0), next_i(S, 0), next_w(S, 0);
  std::vector<std::vector<double>> f_done(S, std::vector<double>(M, kInf)), i_done = f_done;
  std::vector<double> clock(D, 0);
  std::vector<bool> stuck(D, false);
  auto sum = [&](int d, const std::vector<int>& a, const std::vector<int>& b) {
    int n = 0;
    for (int c = 0; c < V; ++c) n += a[vs(d, c)] - b[vs(d, c)];
    return n;
  };
  auto finished = [&](int d) {
    for (int c = 0; c < V; ++c)
      if (next_w[vs(d, c)] < M) return false;
    return true;
  };
  const int w_cap = V * D;
  for (int steps = 0;; ++steps) {
    PT_CHECK(steps < 16 * S * S * (M + 1) + 64) << "zero-bubble generator stalled";
    // The device whose clock is earliest: every completion up to its time is known.
    // (A device that found nothing to do at its time goes after the others at that time.)
    int d = -1;
    for (int q = 0; q < D; ++q)
      if (!finished(q) && (d < 0 || clock[q] < clock[d] || (clock[q] == clock[d] && stuck[d] && !stuck[q]))) d = q;
    if (d < 0) break;
    const double t = clock[d];
    const bool w_room = sum(d, next_i, next_w) < w_cap;
    int best_i = -1, best_f = -1, best_w = -1;
    double i_at = kInf, w_at = kInf, next = kInf;
    for (int c = 0; c < V; ++c) {
      const int v = vs(d, c);
      const int j_i = next_i[v], j_f = next_f[v];
      const double ia = j_i < j_f ? (v == S - 1 ? f_done[v][j_i] : i_done[v + 1][j_i]) : kInf;
      const bool f_room = V == 1 ? j_f - j_i < D - d : c > 0 || sum(d, next_f, next_i) < V * D;
      const double fa = j_f < M && f_room ? (v == 0 ? 0.0 : f_done[v - 1][j_f]) : kInf;
      next = std::min({next, ia, fa});
      if (ia <= t && w_room && (best_i < 0 || ia <= i_at)) best_i = c, i_at = ia;
      if (fa <= t) best_f = c;  // the deepest ready chunk
      if (next_w[v] < j_i && (best_w < 0 || i_done[v][next_w[v]] < w_at)) best_w = c, w_at = i_done[v][next_w[v]];
    }
    ActionKind kind;
    int c, j;
    if (best_i >= 0) {
      c = best_i, kind = ActionKind::kInputGrad, j = next_i[vs(d, c)]++;
      i_done[vs(d, c)][j] = t + dur(vs(d, c), 1);
    } else if (best_f >= 0) {
      c = best_f, kind = ActionKind::kForward, j = next_f[vs(d, c)]++;
      f_done[vs(d, c)][j] = t + dur(vs(d, c), 0);
    } else if (best_w >= 0) {
      c = best_w, kind = ActionKind::kWeightGrad, j = next_w[vs(d, c)]++;
    } else {
      // Nothing to do yet: on to the next time something may become ready here.
      for (int q = 0; q < D; ++q)
        if (q != d && !finished(q) && (clock[q] > t || (clock[q] == t && !stuck[q]))) next = std::min(next, clock[q]);
      PT_CHECK(std::isfinite(next) && !(next == t && stuck[d])) << "zero-bubble generator: device " << d << " waits for nothing";
      stuck[d] = next == t;
      clock[d] = next;
      continue;
    }
    std::fill(stuck.begin(), stuck.end(), false);
    out[d].steady.push_back(Action{kind, j, 0, c});
    clock[d] = t + dur(vs(d, c), kind == ActionKind::kForward ? 0 : kind == ActionKind::kInputGrad ? 1 : 2);
  }
  for (StageProgram& p : out)
    for (int c = V - 1; c >= 0; --c) p.steady.push_back(Action{ActionKind::kUpdate, 0, 0, c});
  return out;
}

// Interleaved 1F1B (Megatron-LM, Narayanan et al. SC 2021), device d of N with V chunks: the
// device's k-th forward (over all of its chunks) is micro-batch (k / NV) N + k % N on chunk
// (k % NV) / N, i.e. N micro-batches at a time through chunk 0, then through chunk 1, ...; its
// k-th backward the same micro-batch on chunk V-1 - that. It runs 2 (N-d-1) + (V-1) N forwards
// ahead (all of them when M = N), then one forward and one backward in turn, the remaining
// backwards, and the updates of its chunks.
StageProgram interleaved(int d, int N, int V, int M) {
  const int total = M * V;
  auto micro = [&](int k) { return (k / (N * V)) * N + k % N; };
  auto chunk = [&](int k, bool forward) {
    const int c = (k % (N * V)) / N;
    return forward ? c : V - 1 - c;
  };
  const int warm = M == N ? total : std::min(2 * (N - d - 1) + (V - 1) * N, total);
  StageProgram p;
  auto f = [&](int k) { p.steady.push_back(Action{ActionKind::kForward, micro(k), 0, chunk(k, true)}); };
  auto b = [&](int k) { p.steady.push_back(Action{ActionKind::kBackward, micro(k), 0, chunk(k, false)}); };
  for (int k = 0; k < warm; ++k) f(k);
  for (int k = 0; k + warm < total; ++k) {
    f(k + warm);
    b(k);
  }
  for (int k = total - warm; k < total; ++k) b(k);
  for (int c = V - 1; c >= 0; --c) p.steady.push_back(Action{ActionKind::kUpdate, 0, 0, c});
  return p;
}

}  // namespace

std::string interleaved_error(int stages, int chunks, int micro_batches) {
  if (stages < 2) return "--schedule interleaved needs at least 2 stages (--gpus); one device runs its chunks in a row";
  if (chunks < 1) return "--virtual-stages " + std::to_string(chunks) + ": must be at least 1";
  if (micro_batches % stages != 0)
    return "--micro-batches " + std::to_string(micro_batches) + ": interleaved stages run micro-batches in groups of --gpus " +
           std::to_string(stages) + " (Megatron-LM's order); use a multiple of " + std::to_string(stages);
  return "";
}

ScheduleIR make_schedule(Schedule s, WeightMode w, int stages, int micro_batches, const std::vector<PassTimes>* times,
                         int chunks) {
  ScheduleIR ir;
  const int N = std::max(1, stages);
  const int M = std::max(1, micro_batches);
  ir.synchronous = synchronous(s, w);
  ir.micro_batches = micro_batched(s, w) ? M : 1;
  switch (s) {
    case Schedule::kZBV:
      ir.name = "zbv";
      ir.chunks = 2;
      ir.v_shape = true;
      PT_CHECK(N >= 2) << "zbv needs at least 2 stages";
      ir.stages = zero_bubble(N, 2, true, M, times);
      break;
    case Schedule::kInterleaved: {
      ir.name = "interleaved";
      ir.chunks = std::max(1, chunks);
      const std::string why = interleaved_error(N, ir.chunks, M);
      PT_CHECK(why.empty()) << why;
      for (int d = 0; d < N; ++d) ir.stages.push_back(interleaved(d, N, ir.chunks, M));
      break;
    }
    case Schedule::kGPipe:
      ir.name = "gpipe";
      ir.stages.assign(N, gpipe(M));
      break;
    case Schedule::kZBH1:
      ir.name = "zb-h1";
      ir.stages = zero_bubble(N, 1, false, M, times);
      break;
    case Schedule::kAuto:
      PT_CHECK(false) << "--schedule auto is resolved before a program is made";
      break;
    case Schedule::k1F1B:
      if (two_bw_family(w)) {
        ir.name = weight_mode_name(w);
        for (int k = 0; k < N; ++k) ir.stages.push_back(two_bw(k, N, M));
        break;
      }
      ir.name = ir.synchronous ? "1f1b-sync" : "1f1b";
      for (int k = 0; k < N; ++k)
        ir.stages.push_back(ir.synchronous ? one_f_one_b_sync(k, N, M) : one_f_one_b_async(k, N));
      break;
  }
  return ir;
}

ProgramCursor::ProgramCursor(const StageProgram& p, int64_t first, int64_t end) : p_(p), first_(first), end_(end) {
  min_offset_ = INT_MAX;
  for (const Action& a : p.steady) min_offset_ = std::min(min_offset_, a.offset);
}

bool ProgramCursor::next(Step* s) {
  while (true) {
    if (in_warmup_) {
      if (pos_ >= p_.warmup.size()) {
        in_warmup_ = false;
        pos_ = 0;
        continue;
      }
      const Action& a = p_.warmup[pos_++];
      const int64_t mb = first_ + a.offset;
      if (mb < end_) {
        *s = Step{a, mb};
        return true;
      }
      continue;
    }
    if (p_.steady.empty() || first_ + iteration_ + min_offset_ >= end_) return false;
    const Action& a = p_.steady[pos_++];
    const int64_t mb = first_ + iteration_ + a.offset;
    if (pos_ >= p_.steady.size()) {
      pos_ = 0;
      ++iteration_;
    }
    if (mb < end_) {
      *s = Step{a, mb};
      return true;
    }
  }
}

std::vector<Step> expand(const StageProgram& p, int64_t mini_batches) {
  std::vector<Step> out;
  ProgramCursor c(p, 0, mini_batches);
  Step s;
  while (c.next(&s)) out.push_back(s);
  return out;
}

namespace {

// "stage 2", or for interleaved stages "virtual stage 5 (stage 1, chunk 2)".
std::string stage_label(const ScheduleIR& ir, int v) {
  if (ir.chunks <= 1) return "stage " + std::to_string(v);
  return "virtual stage " + std::to_string(v) + " (stage " + std::to_string(ir.device_of(v)) + ", chunk " +
         std::to_string(ir.chunk_of(v)) + ")";
}

}  // namespace

Status check_schedule(const ScheduleIR& ir, const std::string& where) {
  const int M = ir.micro_batches;
  if (ir.stages.empty()) return invalid_input(where + "no stages");
  if (ir.chunks < 1) return invalid_input(where + "no chunks");
  for (size_t d = 0; d < ir.stages.size(); ++d)
    for (const auto* part : {&ir.stages[d].warmup, &ir.stages[d].steady})
      for (const Action& a : *part)
        if (a.chunk < 0 || a.chunk >= ir.chunks)
          return invalid_input(where + "stage " + std::to_string(d) + ", action " + action_token(a) + ": chunk " +
                               std::to_string(a.chunk) + " of " + std::to_string(ir.chunks));
  for (int k = 0; k < ir.virtual_stages(); ++k) {
    const StageProgram p = ir.chunk_program(k);
    if (p.steady.empty()) return invalid_input(where + stage_label(ir, k) + " has no steady part");
    int lo = INT_MAX, hi = INT_MIN;
    for (const Action& a : p.steady) {
      lo = std::min(lo, a.offset);
      hi = std::max(hi, a.offset);
    }
    // Enough mini-batches that every pass of the middle ones appears: the offsets' span and the
    // warm-up's, twice.
    const int64_t T = 2 * (hi - lo + static_cast<int64_t>(p.warmup.size()) + 2);
    // [mini-batch][micro] -> seen F, B, I, W; [mini-batch] -> U seen; what every pass did last.
    std::map<int64_t, std::vector<int>> f, b, i, w;
    std::map<int64_t, int> u;
    auto fail = [&](const Step& s, const std::string& why) {
      Action a = s.action;
      a.chunk = ir.chunk_of(k);
      return invalid_input(where + stage_label(ir, k) + ", mini-batch " + std::to_string(s.mini_batch) + ", action " +
                           action_token(a) + ": " + why);
    };
    for (const Step& s : expand(p, T)) {
      const Action& a = s.action;
      if (a.micro < 0 || a.micro >= M)
        return fail(s, "micro-batch " + std::to_string(a.micro) + " of " + std::to_string(M));
      for (auto* m : {&f, &b, &i, &w}) (*m)[s.mini_batch].resize(M, 0);
      const int j = a.micro;
      const int64_t mb = s.mini_batch;
      switch (a.kind) {
        case ActionKind::kForward:
          if (f[mb][j]++) return fail(s, "repeated");
          if (j > 0 && !f[mb][j - 1]) return fail(s, "before F" + std::to_string(j - 1) + " (forwards run in micro-batch order)");
          if (u.count(mb)) return fail(s, "after the update of its mini-batch");
          break;
        case ActionKind::kBackward:
        case ActionKind::kInputGrad: {
          if (!f[mb][j]) return fail(s, "before its forward");
          if (b[mb][j] || i[mb][j]) return fail(s, "repeated (the backward of this micro-batch ran already)");
          (a.kind == ActionKind::kBackward ? b : i)[mb][j] = 1;
          break;
        }
        case ActionKind::kWeightGrad:
          if (!i[mb][j]) return fail(s, b[mb][j] ? "after a whole backward B" : "before its input-gradient part I");
          if (w[mb][j]++) return fail(s, "repeated");
          break;
        case ActionKind::kUpdate:
          if (u[mb]++) return fail(s, "repeated");
          for (int jj = 0; jj < M; ++jj) {
            const bool done = b[mb][jj] || (i[mb][jj] && w[mb][jj]);
            if (!done) {
              Action x{f[mb][jj] ? (i[mb][jj] ? ActionKind::kWeightGrad : ActionKind::kBackward) : ActionKind::kForward, jj, 0};
              return fail(s, "before " + action_token(x) + " of its mini-batch");
            }
          }
          break;
      }
    }
    // Every mini-batch the program finished (its update ran) must have had every pass.
    for (int64_t mb = 0; mb < T; ++mb)
      if (!u.count(mb)) {
        // Programs drain at the end: mini-batches near T may be cut short only when not complete
        // by construction; the first half must be whole.
        if (mb < T / 2)
          return invalid_input(where + stage_label(ir, k) + ", mini-batch " + std::to_string(mb) + ": no update U");
      }
  }
  return Status::ok();
}

namespace {

// Passes of stage k between F and their end (B, I or W per `ends`) at the program's peak, over
// enough mini-batches to reach its steady state.
int peak_between(const ScheduleIR& ir, int stage, bool count_until_i, bool only_i_to_w) {
  const StageProgram p = ir.chunks > 1 ? ir.chunk_program(stage) : ir.stages.at(stage);
  const int64_t T = 4 + static_cast<int64_t>(p.warmup.size()) * 2;
  int now = 0, peak = 0;
  for (const Step& s : expand(p, T)) {
    switch (s.action.kind) {
      case ActionKind::kForward:
        if (!only_i_to_w) ++now;
        break;
      case ActionKind::kBackward:
        if (!only_i_to_w) --now;
        break;
      case ActionKind::kInputGrad:
        if (only_i_to_w) ++now;
        else if (count_until_i) --now;
        break;
      case ActionKind::kWeightGrad:
        if (only_i_to_w || !count_until_i) --now;
        break;
      case ActionKind::kUpdate:
        break;
    }
    peak = std::max(peak, now);
  }
  return std::max(1, peak);
}

}  // namespace

int program_in_flight(const ScheduleIR& ir, int stage, bool after_input_grad) {
  return peak_between(ir, stage, after_input_grad, false);
}

int w_state_in_flight(const ScheduleIR& ir, int stage) { return ir.splits_backward() ? peak_between(ir, stage, false, true) : 0; }

int schedule_in_flight(Schedule s, WeightMode w, int stages, int stage, int micro_batches, int chunks) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int, int>, std::vector<int>> memo;
  const int N = std::max(1, stages), M = micro_batched(s, w) ? std::max(1, micro_batches) : 1;
  const int V = s == Schedule::kInterleaved ? std::max(1, chunks) : s == Schedule::kZBV ? 2 : 1;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<int>& v = memo[{static_cast<int>(s), synchronous(s, w) ? 1 : two_bw_family(w) ? 2 : 0, N, M, V}];
  if (v.empty()) {
    if ((s == Schedule::kInterleaved && (N % V != 0 || !interleaved_error(N / V, V, M).empty())) ||
        (s == Schedule::kZBV && (N % 2 != 0 || N < 4))) {
      v.assign(N, M);  // no such order: every micro-batch in flight, as GPipe
      return v.at(std::clamp(stage, 0, N - 1));
    }
    const ScheduleIR ir = make_schedule(s, w, N / V, M, nullptr, V);
    for (int k = 0; k < N; ++k)  // ZB-H1's order depends on the stage times: its caps bound any
      v.push_back(s == Schedule::kZBH1 ? std::min(M, 2 * N - k) : program_in_flight(ir, k));
  }
  return v.at(std::clamp(stage, 0, N - 1));
}

std::string schedule_csv(const ScheduleIR& ir) {
  std::string out = "# onnx-pipetrain schedule " + ir.name + ": " + std::to_string(ir.stages.size()) + " stages, " +
                    std::to_string(ir.micro_batches) + " micro-batches per mini-batch" +
                    (ir.synchronous ? ", synchronous (one update per mini-batch)" : ", asynchronous") + "\n";
  out += "# F forward, B backward, I its input-gradient part, W its weight-gradient part, U update; the digit is the\n";
  out += "# micro-batch, +k a later mini-batch. warmup runs once, steady once per mini-batch.\n";
  if (ir.chunks > 1 && !ir.v_shape)
    out.append("# ").append(std::to_string(ir.chunks)).append(" virtual stages per stage: @c is chunk c of the row's stage k, virtual stage c x ")
        .append(std::to_string(ir.stages.size())).append(" + k.\n");
  if (ir.v_shape)
    out.append("# virtual stages in a V: @1 is the row's stage k's chunk 1, virtual stage ")
        .append(std::to_string(2 * ir.stages.size() - 1)).append(" - k.\n");
  out += "stage,part,actions\n";
  if (ir.v_shape) out += "placement,v,\n";
  for (size_t k = 0; k < ir.stages.size(); ++k)
    for (const auto& [part, acts] : {std::pair<const char*, const std::vector<Action>*>{"warmup", &ir.stages[k].warmup},
                                     {"steady", &ir.stages[k].steady}}) {
      if (acts->empty()) continue;
      out.append(std::to_string(k)).append(",").append(part).append(",");
      for (size_t i = 0; i < acts->size(); ++i) out.append(i ? " " : "").append(action_token((*acts)[i]));
      out.append("\n");
    }
  return out;
}

namespace {

bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  *out = std::stoi(s);
  return true;
}

bool parse_action(const std::string& tok, Action* a) {
  if (tok.empty()) return false;
  switch (tok[0]) {
    case 'F': a->kind = ActionKind::kForward; break;
    case 'B': a->kind = ActionKind::kBackward; break;
    case 'I': a->kind = ActionKind::kInputGrad; break;
    case 'W': a->kind = ActionKind::kWeightGrad; break;
    case 'U': a->kind = ActionKind::kUpdate; break;
    default: return false;
  }
  std::string rest = tok.substr(1);
  a->chunk = 0;
  if (const size_t at = rest.find('@'); at != std::string::npos) {
    if (!parse_int(rest.substr(at + 1), &a->chunk)) return false;
    rest = rest.substr(0, at);
  }
  a->offset = 0;
  if (const size_t plus = rest.find('+'); plus != std::string::npos) {
    if (!parse_int(rest.substr(plus + 1), &a->offset)) return false;
    rest = rest.substr(0, plus);
  }
  a->micro = 0;
  if (a->kind == ActionKind::kUpdate) return rest.empty();
  return parse_int(rest, &a->micro);
}

}  // namespace

Expected<ScheduleIR> parse_schedule_csv(const std::string& text, const std::string& path) {
  ScheduleIR ir;
  ir.name = path;
  ir.synchronous = true;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  bool header = false;
  std::map<int, StageProgram> stages;
  std::map<std::pair<int, std::string>, bool> seen;
  int max_micro = -1, max_chunk = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string at = path + ":" + std::to_string(line_no) + ": ";
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      if (line != "stage,part,actions") return invalid_input(at + "expected the header 'stage,part,actions'");
      header = true;
      continue;
    }
    const size_t c1 = line.find(','), c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string::npos) return invalid_input(at + "expected 'stage,part,actions'");
    if (line.substr(0, c1) == "placement") {  // "placement,v," (ZB-V's) or "placement,loop,"
      const std::string how = line.substr(c1 + 1, c2 - c1 - 1);
      if (how != "v" && how != "loop") return invalid_input(at + "placement '" + how + "': expected v or loop");
      ir.v_shape = how == "v";
      continue;
    }
    int stage = 0;
    if (!parse_int(line.substr(0, c1), &stage) || stage > 4096) return invalid_input(at + "stage '" + line.substr(0, c1) + "' is not a stage number");
    const std::string part = line.substr(c1 + 1, c2 - c1 - 1);
    if (part != "warmup" && part != "steady") return invalid_input(at + "part '" + part + "': expected warmup or steady");
    if (seen[{stage, part}]) return invalid_input(at + "stage " + std::to_string(stage) + " has two " + part + " rows");
    seen[{stage, part}] = true;
    std::vector<Action>& acts = part == "warmup" ? stages[stage].warmup : stages[stage].steady;
    std::istringstream toks(line.substr(c2 + 1));
    std::string tok;
    while (toks >> tok) {
      Action a;
      if (!parse_action(tok, &a)) return invalid_input(at + "stage " + std::to_string(stage) + ": action '" + tok + "' is not F, B, I or W<micro-batch>[+offset][@chunk] or U[+offset][@chunk]");
      if (a.offset != 0) ir.synchronous = false;
      max_micro = std::max(max_micro, a.micro);
      if (a.chunk > 64) return invalid_input(at + "stage " + std::to_string(stage) + ": action '" + tok + "': more than 64 chunks");
      max_chunk = std::max(max_chunk, a.chunk);
      acts.push_back(a);
      if (acts.size() > 1 << 20) return invalid_input(at + "too many actions");
    }
  }
  if (!header) return invalid_input(path + ": no 'stage,part,actions' header");
  if (stages.empty()) return invalid_input(path + ": no stage rows");
  for (int k = 0; k < static_cast<int>(stages.size()); ++k)
    if (!stages.count(k)) return invalid_input(path + ": stage " + std::to_string(k) + " has no row (stages are numbered from 0)");
  for (auto& [k, p] : stages) {
    if (!p.warmup.empty()) ir.synchronous = false;
    ir.stages.push_back(std::move(p));
  }
  ir.micro_batches = std::max(1, max_micro + 1);
  ir.chunks = max_chunk + 1;
  if (ir.v_shape && ir.chunks != 2)
    return invalid_input(path + ": placement v needs two chunks per stage (actions @1); it has " + std::to_string(ir.chunks));
  RETURN_IF_ERROR(check_schedule(ir, path + ": "));
  return ir;
}

Expected<ScheduleIR> read_schedule_file(const std::string& path) {
  RETURN_IF_ERROR(check_regular_file(path));
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_input(path + ": cannot be read");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (ss.str().size() > (64u << 20)) return invalid_input(path + ": larger than 64 MiB; not a schedule");
  return parse_schedule_csv(ss.str(), path);
}

}  // namespace pt
