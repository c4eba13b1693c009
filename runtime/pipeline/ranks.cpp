// The pipelined trainer with one stage per rank (runtime/dist/cluster.h): the links between this
// rank's stage and its neighbours, the data links from rank 0, and the coordinator messages that
// bring losses, validation weights, checkpoints and the final weights, stats and trace to rank 0
// (the MPI RankCoordinator).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/dist/cluster.h"
#include "runtime/dist/nccl_link.h"
#include "runtime/pipeline/stage.h"
#include "runtime/loop/rank_coordinator.h"

namespace pt {

static_assert(std::is_trivially_copyable_v<StageStats>, "StageStats travels as bytes");
static_assert(std::is_trivially_copyable_v<PassRecord>, "PassRecord travels as bytes");

namespace {

size_t value_bytes(const Value* v) { return static_cast<size_t>(numel(v->dims)) * dtype_size(v->dtype); }

}  // namespace

Status PipelineTrainer::Impl::wire_ranks(const StageLayout& layout, int capacity) {
  Cluster& C = *opts.cluster;
  const int me = C.rank();
  const int my_r = my_replica();
  // The stages of this rank's replica: links join ranks of one replica (rank_of(stage, replica)).
  // Two stages of one rank (a device's virtual stages: ZB-V's turn) meet through a channel here.
  auto R_ = [&](int stage) { return rank_of(stage, my_r); };
  auto add = [&](std::unique_ptr<Link> link) {
    channels.push_back(std::move(link));
    return channels.back().get();
  };
  const std::shared_ptr<Device> my_device = local_stages().at(0)->ex->device();
  // Links between CUDA stages on GPUs of their own go through NCCL; otherwise through MPI (host
  // staged). Every rank walks the same list of links, so a link's number names it on both ends.
  const bool nccl = opts.nccl_links && opts.device == DeviceKind::kCuda;
  int link_no = 0;
  auto make = [&](const std::vector<const Value*>& values, int from, int to, int kind, int slots) -> Expected<std::unique_ptr<Link>> {
    if (from == to) {  // within this rank
      ASSIGN_OR_RETURN(std::unique_ptr<Channel> ch, Channel::create(values, slots, my_device));
      ch->set_spin(std::chrono::microseconds(opts.handoff_spin_us));
      return std::unique_ptr<Link>(std::move(ch));
    }
    if (nccl) return make_nccl_link(values, C, from, to, link_no, my_device);
    return C.make_link(values, from, to, kind, slots);
  };
  for (const auto* flows : {&layout.activations, &layout.gradients}) {
    const bool forward = flows == &layout.activations;
    for (const ValueFlow& f : *flows) {
      const int from = R_(f.from), to = R_(f.to);
      ++link_no;
      if (from != me && to != me) continue;
      ASSIGN_OR_RETURN(std::unique_ptr<Link> link, make(f.values, from, to, forward ? kLinkForward : kLinkBackward, capacity));
      Link* l = add(std::move(link));
      if (from == to && opts.trade_handoffs && my_device->host_memory())  // two stages of this rank
        static_cast<Channel*>(l)->trade(handed_over(*stages[f.from], layout, f.values), true);
      if (from == me) (forward ? stages[f.from]->fwd_out : stages[f.from]->bwd_out).push_back(l);
      if (to == me) (forward ? stages[f.to]->fwd_in : stages[f.to]->bwd_in).push_back(l);
    }
  }
  // Shared weights, owner to reader (the trainer attaches them to the stages).
  shared_links.assign(layout.weights.size(), nullptr);
  for (size_t i = 0; i < layout.weights.size(); ++i) {
    const WeightFlow& f = layout.weights[i];
    const int owner = R_(f.owner), reader = R_(f.reader);
    ++link_no;
    if (owner != me && reader != me) continue;
    ASSIGN_OR_RETURN(std::unique_ptr<Link> link,
                     make(f.values, owner, reader, f.backward ? kLinkWeightsBackward : kLinkWeightsForward, f.slots));
    shared_links[i] = add(std::move(link));
  }
  // Data links from rank 0 to the stages of replica 0 that read data (the other replicas' stages
  // receive their batches as messages: relay_claims). A stage on rank 0 itself reads the data as in
  // one process.
  for (auto& st : stages) {
    if (st->index == 0 || (!st->reads_input && !st->reads_labels && st->more_inputs.empty())) continue;
    ++link_no;
    const int q = rank_of(st->index, 0);
    if (q == 0 || (me != 0 && me != q)) continue;
    std::vector<const Value*> values;
    if (st->reads_input) values.push_back(st->input);
    if (st->reads_labels) values.push_back(st->labels);
    for (const auto& [k, v] : st->more_inputs) values.push_back(v);  // several inputs: those it reads
    ASSIGN_OR_RETURN(std::unique_ptr<Link> link, make(values, 0, q, kLinkData, capacity));
    Link* l = add(std::move(link));
    if (me == 0) stages[0]->data_out.push_back(l);
    else st->data_in = l;
  }
  return Status::ok();
}

size_t PipelineTrainer::Impl::snapshot_bytes(int k) const {
  size_t n = 0;
  for (const Value* v : stages.at(k)->params) n += value_bytes(v);
  for (const Value* v : stages.at(k)->state) n += value_bytes(v);
  return n;
}

void PipelineTrainer::Impl::pack_snapshot(const std::vector<std::pair<const Value*, HostTensor>>& snap,
                                          std::vector<char>* out) const {
  size_t n = 0;
  for (const auto& [v, t] : snap) n += t.bytes();
  out->resize(n);
  char* p = out->data();
  for (const auto& [v, t] : snap) {
    std::memcpy(p, t.data(), t.bytes());
    p += t.bytes();
  }
}

void PipelineTrainer::Impl::unpack_into_eval(int k, const std::vector<char>& in) {
  const char* p = in.data();
  for (const auto* list : {&stages.at(k)->params, &stages.at(k)->state})
    for (const Value* v : *list) {
      HostTensor& t = eval->host(v);
      std::memcpy(t.data(), p, t.bytes());
      p += t.bytes();
    }
}

std::vector<const Value*> PipelineTrainer::Impl::checkpoint_values_of(int k) const {
  const Stage& st = *stages.at(k);
  std::vector<const Value*> out;
  for (size_t i = 0; i < st.params.size(); ++i) {
    out.push_back(st.params[i]);
    out.insert(out.end(), st.opt_state[i].begin(), st.opt_state[i].end());
  }
  out.insert(out.end(), st.state.begin(), st.state.end());
  return out;
}

void PipelineTrainer::Impl::pack_values(const std::vector<const Value*>& vs, const std::map<std::string, HostTensor>& t,
                                        std::vector<char>* out) const {
  size_t n = 0;
  for (const Value* v : vs) n += value_bytes(v);
  out->resize(n);
  char* p = out->data();
  for (const Value* v : vs) {
    const HostTensor& x = t.at(v->name);
    std::memcpy(p, x.data(), x.bytes());
    p += x.bytes();
  }
}

void PipelineTrainer::Impl::unpack_values(const std::vector<const Value*>& vs, const std::vector<char>& in,
                                          std::map<std::string, HostTensor>* t) const {
  const char* p = in.data();
  for (const Value* v : vs) {
    HostTensor x(v->dtype, v->dims);
    std::memcpy(x.data(), p, x.bytes());
    p += x.bytes();
    (*t)[v->name] = std::move(x);
  }
}

namespace {

// One stage per rank: rank 0 leads, and every message between the loops of two ranks goes
// through here (the stages' own links are wired by wire_ranks).
class MpiCoordinator final : public RankCoordinator {
 public:
  explicit MpiCoordinator(PipelineTrainer::Impl& impl)
      : RankCoordinator(impl.opts.cluster->rank() == 0), impl_(impl), cluster_(*impl.opts.cluster) {}
  bool distributed() const override { return true; }
  int local_stages() const override { return static_cast<int>(mine().size()); }
  Status agree_data(int64_t* n, bool* validate) override;
  Status share_resume(const Status& resumed, int64_t* start, const Tensors& tensors) override;
  void relay_claims(RunShared& sh) override;
  Status agree_segment_end(int64_t* step, bool* stop) override;
  Status gather_checkpoint(int64_t step, Tensors* t) override;
  Status pass_losses(int64_t s0, std::vector<double>* losses) override;
  Status send_snapshot(int64_t s0, const Snapshot& snap) override;
  Status gather_snapshots(int64_t s0) override;
  Status gather_final() override;
  void at_step(int64_t step) override { cluster_.note_step(step); }

 private:
  int num_stages() const { return static_cast<int>(impl_.stages.size()); }
  // This rank's stages (its device's), in stage order; those of rank q.
  std::vector<int> mine() const { return impl_.stages_of_device(impl_.my_device()); }
  std::vector<int> of_rank(int q) const { return impl_.stages_of_device(q / replicas()); }
  // The checkpoint values of stages `ks`, in stage order.
  std::vector<const Value*> checkpoint_values(const std::vector<int>& ks) const {
    std::vector<const Value*> vs;
    for (int k : ks) {
      const std::vector<const Value*> part = impl_.checkpoint_values_of(k);
      vs.insert(vs.end(), part.begin(), part.end());
    }
    return vs;
  }
  int replicas() const { return impl_.opts.replicas; }
  // Stage k's rank in replica 0: the replica whose weights, state, stats and trace are the run's.
  int rank0_of(int k) const { return impl_.rank_of(k, 0); }
  size_t bytes_of(const std::vector<const Value*>& vs) const {
    size_t bytes = 0;
    for (const Value* v : vs) bytes += v->bytes();
    return bytes;
  }
  PipelineTrainer::Impl& impl_;
  Cluster& cluster_;
  int64_t segments_ended_ = 0;  // numbers the segment-end messages
  std::vector<char> snap_buf_;  // a stage's snapshot on its way to rank 0 (and back in)
};

Status MpiCoordinator::agree_data(int64_t* n, bool* validate) {  // rank 0 alone reads the data
  int64_t hdr[2] = {*n, *validate ? 1 : 0};
  RETURN_IF_ERROR(cluster_.broadcast(hdr, sizeof hdr, 0));
  *n = hdr[0];
  *validate = hdr[1] != 0;
  return Status::ok();
}

// Rank 0 alone reads the checkpoint; it tells the others whether it resumes and from which step,
// then sends every rank its stage's tensors.
Status MpiCoordinator::share_resume(const Status& resumed, int64_t* start, const Tensors& tensors) {
  int64_t rs[2] = {resumed.is_ok() ? 1 : 0, *start};
  RETURN_IF_ERROR(cluster_.broadcast(rs, sizeof rs, 0));
  if (!rs[0]) return leads() ? resumed : Status(StatusCode::kInvalidInput, "rank 0 could not resume (its message says why)");
  *start = rs[1];
  std::vector<char> buf;
  for (int q = 1; q < cluster_.size(); ++q) {  // every rank: its stages' part (each replica alike)
    if (leads()) {
      impl_.pack_values(checkpoint_values(of_rank(q)), tensors, &buf);
      if (!cluster_.send(q, kMsgCheckpoint, 0, buf.data(), buf.size()))
        return internal_error("aborted while sending rank " + std::to_string(q) + " its checkpoint");
    } else if (q == cluster_.rank()) {
      const std::vector<const Value*> vs = checkpoint_values(mine());
      buf.resize(bytes_of(vs));
      if (!cluster_.recv(0, kMsgCheckpoint, 0, buf.data(), buf.size()))
        return internal_error("aborted while receiving this rank's checkpoint from rank 0");
      Tensors t;
      impl_.unpack_values(vs, buf, &t);
      RETURN_IF_ERROR(impl_.restore_tensors(t, *start));
    }
  }
  return Status::ok();
}

// Every rank sends its stage's part to rank 0, which writes the one file (the same format as in
// one process, so it resumes on any --gpus).
Status MpiCoordinator::gather_checkpoint(int64_t step, Tensors* t) {
  if (!leads()) {
    if (impl_.my_replica() != 0) return Status::ok();  // replica 0's stages hold the run's weights
    std::vector<char> buf;
    impl_.pack_values(checkpoint_values(mine()), *t, &buf);
    if (!cluster_.send(0, kMsgCheckpoint, step, buf.data(), buf.size()))
      return internal_error("aborted while sending the checkpoint of step " + std::to_string(step) + " to rank 0");
    return Status::ok();
  }
  for (int q = replicas(); q < cluster_.size(); q += replicas()) {  // replica 0's ranks
    const std::vector<const Value*> vs = checkpoint_values(of_rank(q));
    std::vector<char> buf(bytes_of(vs));
    if (!cluster_.recv(q, kMsgCheckpoint, step, buf.data(), buf.size()))
      return internal_error("aborted while gathering the checkpoint of step " + std::to_string(step));
    impl_.unpack_values(vs, buf, t);
  }
  return Status::ok();
}

// The loss stage's rank of each replica tells rank 0, which takes the mean over the replicas in
// replica order (the arithmetic of one process).
Status MpiCoordinator::pass_losses(int64_t s0, std::vector<double>* losses) {
  const size_t bytes = losses->size() * sizeof(double);
  auto lost = [&] { return internal_error("aborted while passing the loss of step " + std::to_string(s0 + 1) + " to rank 0"); };
  const int L = impl_.loss_stage;
  if (!leads()) {
    if (impl_.local(L) && !cluster_.send(0, kMsgLoss, s0, losses->data(), bytes)) return lost();
    return Status::ok();
  }
  if (rank0_of(L) != 0 && !cluster_.recv_patiently(rank0_of(L), kMsgLoss, s0, losses->data(), bytes)) return lost();
  if (replicas() == 1) return Status::ok();
  std::vector<double> part(losses->size());
  for (int r = 1; r < replicas(); ++r) {
    if (!cluster_.recv(impl_.rank_of(L, r), kMsgLoss, s0, part.data(), bytes)) return lost();
    for (size_t j = 0; j < part.size(); ++j) (*losses)[j] += part[j];
  }
  for (double& l : *losses) l /= replicas();
  return Status::ok();
}

Status MpiCoordinator::send_snapshot(int64_t s0, const Snapshot& snap) {
  impl_.pack_snapshot(snap, &snap_buf_);
  if (!cluster_.send(0, kMsgSnapshot, s0, snap_buf_.data(), snap_buf_.size()))
    return internal_error("aborted while sending the weights of step " + std::to_string(s0 + 1) + " to rank 0");
  return Status::ok();
}

Status MpiCoordinator::gather_snapshots(int64_t s0) {
  for (int q = replicas(); q < cluster_.size(); q += replicas()) {  // one message per rank of replica 0
    const std::vector<int> ks = of_rank(q);
    size_t bytes = 0;
    for (int k : ks) bytes += impl_.snapshot_bytes(k);
    snap_buf_.resize(bytes);
    if (!cluster_.recv(q, kMsgSnapshot, s0, snap_buf_.data(), snap_buf_.size()))
      return internal_error("aborted while gathering the weights of step " + std::to_string(s0 + 1));
    size_t at = 0;
    for (int k : ks) {
      const size_t n = impl_.snapshot_bytes(k);
      impl_.unpack_into_eval(k, std::vector<char>(snap_buf_.begin() + static_cast<std::ptrdiff_t>(at),
                                                  snap_buf_.begin() + static_cast<std::ptrdiff_t>(at + n)));
      at += n;
    }
  }
  return Status::ok();
}

Status MpiCoordinator::gather_final() {
  const int me = cluster_.rank();
  auto lost = [](int k, const char* what) {
    return internal_error(std::string("aborted while gathering ") + what + " of stage " + std::to_string(k) + " to rank 0");
  };
  if (me != 0) {
    if (impl_.my_replica() != 0) return Status::ok();  // replica 0's weights, stats and trace are the run's
    // One message of this rank's stages' weights and state (in stage order), then per stage its
    // stats and trace.
    std::vector<std::pair<const Value*, HostTensor>> snap;
    for (int k : mine()) {
      const Stage& st = *impl_.stages.at(k);
      for (size_t i = 0; i < st.params.size(); ++i) {
        ASSIGN_OR_RETURN(HostTensor t, st.master(i));
        snap.emplace_back(st.params[i], std::move(t));
      }
      for (const Value* v : st.state) {
        ASSIGN_OR_RETURN(HostTensor t, st.ex->fetch(v));
        snap.emplace_back(v, std::move(t));
      }
    }
    std::vector<char> buf;
    impl_.pack_snapshot(snap, &buf);
    if (!cluster_.send(0, kMsgFinal, 0, buf.data(), buf.size())) return lost(mine().front(), "the weights");
    for (int k : mine()) {
      const Stage& st = *impl_.stages.at(k);
      const StageStats stats = st.stats;
      if (!cluster_.send(0, kMsgStats, 0, &stats, sizeof stats)) return lost(k, "the stats");
      const int64_t count = static_cast<int64_t>(st.trace.size());
      if (!cluster_.send(0, kMsgTraceCount, 0, &count, sizeof count)) return lost(k, "the trace");
      if (count > 0 && !cluster_.send(0, kMsgTrace, 0, st.trace.data(), st.trace.size() * sizeof(PassRecord)))
        return lost(k, "the trace");
    }
    return Status::ok();
  }
  impl_.remote_values.clear();
  impl_.remote_stats.clear();
  impl_.remote_trace.clear();
  std::vector<char> buf;
  for (int q = replicas(); q < cluster_.size(); q += replicas()) {  // replica 0's other ranks
    const std::vector<int> ks = of_rank(q);
    size_t bytes = 0;
    for (int k : ks) bytes += impl_.snapshot_bytes(k);
    buf.resize(bytes);
    if (!cluster_.recv(q, kMsgFinal, 0, buf.data(), buf.size())) return lost(ks.front(), "the weights");
    const char* p = buf.data();
    for (int k : ks)
      for (const auto* list : {&impl_.stages[k]->params, &impl_.stages[k]->state})
        for (const Value* v : *list) {
          HostTensor t(v->dtype, v->dims);
          std::memcpy(t.data(), p, t.bytes());
          p += t.bytes();
          impl_.remote_values[v->name] = std::move(t);
        }
    for (int k : ks) {
      StageStats stats;
      if (!cluster_.recv(q, kMsgStats, 0, &stats, sizeof stats)) return lost(k, "the stats");
      impl_.remote_stats.push_back(stats);
      int64_t count = 0;
      if (!cluster_.recv(q, kMsgTraceCount, 0, &count, sizeof count)) return lost(k, "the trace");
      if (count > 0) {
        std::vector<PassRecord> recs(static_cast<size_t>(count));
        if (!cluster_.recv(q, kMsgTrace, 0, recs.data(), recs.size() * sizeof(PassRecord))) return lost(k, "the trace");
        impl_.remote_trace.insert(impl_.remote_trace.end(), recs.begin(), recs.end());
      }
    }
  }
  return Status::ok();
}

void MpiCoordinator::relay_claims(RunShared& sh) {
  Cluster* C = &cluster_;
  const int N = num_stages(), R = replicas(), size = C->size();
  if (C->rank() == 0) {
    // The other replicas' batches: rank 0 alone reads the data, and gathers each replica's share
    // of a mini-batch when it grants that mini-batch (before its own first forward of it), for the
    // ranks of that replica's stages that read the input or the labels.
    struct Feed {
      HostTensor x, y;
      std::vector<int> x_stages, y_stages;
    };
    std::shared_ptr<Feed> feed;
    if (R > 1) {
      feed = std::make_shared<Feed>();
      const Stage& s0 = *impl_.stages.at(0);
      feed->x = HostTensor(s0.input->dtype, s0.input->dims);
      feed->y = HostTensor(s0.labels->dtype, s0.labels->dims);
      for (const auto& st : impl_.stages) {
        if (st->reads_input) feed->x_stages.push_back(st->index);
        if (st->reads_labels) feed->y_stages.push_back(st->index);
      }
    }
    const int M = micro_batched(impl_.opts.schedule, impl_.opts.weights) ? impl_.opts.micro_batches : 1;
    PipelineTrainer::Impl* I = &impl_;
    // A failed send means the run is aborting: the stages stop on their own.
    sh.tell_claim = [C, size, R, M, I, feed, shp = &sh](int64_t step, bool granted) {
      const char g = granted ? 1 : 0;
      for (int q = 1; q < size; ++q) C->send(q, kMsgClaim, step, &g, 1);
      if (!granted || !feed) return;
      const int64_t epoch = step / shp->per_epoch, in_epoch = step % shp->per_epoch;
      const auto order = shp->orders->get(epoch);
      for (int r = 1; r < R; ++r)
        for (int j = 0; j < M; ++j) {
          const int64_t key = step * M + j;
          if (Status st = gather_batch(*shp->data, *order, shp->first_sample(in_epoch, r, j), epoch, &feed->x, &feed->y);
              !st.is_ok()) {
            shp->fail(std::move(st));
            return;
          }
          // Once per rank (a device's stages that read the input share its message).
          std::vector<int> sent;
          for (int k : feed->x_stages)
            if (const int q = I->rank_of(k, r); std::find(sent.begin(), sent.end(), q) == sent.end()) {
              sent.push_back(q);
              C->send(q, kMsgBatchX, key, feed->x.data(), feed->x.bytes());
            }
          sent.clear();
          for (int k : feed->y_stages)
            if (const int q = I->rank_of(k, r); std::find(sent.begin(), sent.end(), q) == sent.end()) {
              sent.push_back(q);
              C->send(q, kMsgBatchY, key, feed->y.data(), feed->y.bytes());
            }
        }
    };
  } else {
    sh.ask_claim = [C](int64_t step) {
      char g = 0;
      return C->recv(0, kMsgClaim, step, &g, 1) && g != 0;
    };
    if (impl_.my_replica() > 0)
      sh.recv_batch = [C](int64_t key, HostTensor* x, HostTensor* y) {
        return (!x || C->recv(0, kMsgBatchX, key, x->data(), x->bytes())) &&
               (!y || C->recv(0, kMsgBatchY, key, y->data(), y->bytes()));
      };
  }
  // --clip-grad-norm under the synchronous schedules: the ranks of each replica send their stages'
  // sums of squares to device 0's rank, which adds them in stage order (the arithmetic of one
  // process) and sends the total back (the replicas' gradients, hence sums, are equal).
  const int r = impl_.my_replica();
  const int root = impl_.rank_of(0, r);
  std::vector<int> members;  // the replica's other ranks
  for (int q = r; q < size; q += R)
    if (q != root) members.push_back(q);
  std::vector<std::vector<int>> stages_of(static_cast<size_t>(size));  // [rank] its stages, in stage order
  for (int q = r; q < size; q += R) stages_of[static_cast<size_t>(q)] = of_rank(q);
  const std::vector<int> own = mine();
  sh.rank_stages = static_cast<int>(own.size());
  sh.rank_position.assign(static_cast<size_t>(N), -1);
  for (size_t i = 0; i < own.size(); ++i) sh.rank_position[static_cast<size_t>(own[i])] = static_cast<int>(i);
  sh.sum_across_ranks = [C, root, members, stages_of, N](int64_t step, const std::vector<double>& local) -> Expected<double> {
    const Status aborted(StatusCode::kInternal, "pipeline aborted");
    double total = 0;
    if (C->rank() == root) {
      std::vector<double> part(static_cast<size_t>(N), 0.0);
      auto place = [&](int q, const std::vector<double>& parts) {
        const std::vector<int>& ks = stages_of[static_cast<size_t>(q)];
        for (size_t i = 0; i < ks.size() && i < parts.size(); ++i) part[static_cast<size_t>(ks[i])] = parts[i];
      };
      place(root, local);
      for (int q : members) {
        std::vector<double> parts(stages_of[static_cast<size_t>(q)].size());
        if (!C->recv(q, kMsgNorm, step, parts.data(), parts.size() * sizeof(double))) return aborted;
        place(q, parts);
      }
      for (double p : part) total += p;
      for (int q : members)
        if (!C->send(q, kMsgNorm, step, &total, sizeof total)) return aborted;
    } else if (!C->send(root, kMsgNorm, step, local.data(), local.size() * sizeof(double)) ||
               !C->recv(root, kMsgNorm, step, &total, sizeof total)) {
      return aborted;
    }
    return total;
  };
}

Status MpiCoordinator::agree_segment_end(int64_t* step, bool* stop) {
  const int64_t n = segments_ended_++;  // the n-th segment (0-based) of train()
  int64_t word[2] = {*step, *stop ? 1 : 0};
  if (cluster_.rank() == 0) {
    for (int q = 1; q < cluster_.size(); ++q)
      if (!cluster_.send(q, kMsgSegmentEnd, n, word, sizeof word))
        return internal_error("aborted while telling rank " + std::to_string(q) + " where the run stands");
    return Status::ok();
  }
  if (!cluster_.recv(0, kMsgSegmentEnd, n, word, sizeof word))
    return internal_error("aborted while hearing from rank 0 where the run stands");
  PT_CHECK(word[0] == *step) << "rank " << cluster_.rank() << " ended a segment at step " << *step << ", rank 0 at " << word[0];
  *stop = word[1] != 0;
  return Status::ok();
}

}  // namespace

namespace {

class RankReducer final : public GradientReducer {
 public:
  RankReducer(Cluster& c, int replicas) : cluster_(c), replicas_(replicas) {}
  Status allreduce(RunShared&, int, const std::vector<TensorView>& grads, Device& dev, void* stream) override {
    const bool staged = dev.kind() != DeviceKind::kCpu;  // MPI reads host memory
    if (staged) RETURN_IF_ERROR(dev.synchronize(stream));
    for (const TensorView& g : grads) {
      if (staged) {
        HostTensor h(g.dtype, g.dims);
        RETURN_IF_ERROR(dev.to_host(h.data(), g.data, g.bytes(), stream));
        RETURN_IF_ERROR(dev.synchronize(stream));
        RETURN_IF_ERROR(cluster_.group_allreduce_sum(h.data(), g.size(), g.dtype));
        RETURN_IF_ERROR(dev.to_device(g.data, h.data(), g.bytes(), stream));
        RETURN_IF_ERROR(dev.synchronize(stream));
      } else {
        RETURN_IF_ERROR(cluster_.group_allreduce_sum(g.data, g.size(), g.dtype));
      }
      RETURN_IF_ERROR(dev.divide(g, replicas_, stream));
    }
    return Status::ok();
  }

 private:
  Cluster& cluster_;
  int replicas_;
};

}  // namespace

std::unique_ptr<GradientReducer> make_rank_reducer(Cluster& cluster, int replicas) {
  return std::make_unique<RankReducer>(cluster, replicas);
}

std::unique_ptr<RankCoordinator> make_mpi_coordinator(PipelineTrainer::Impl& impl) {
  return std::make_unique<MpiCoordinator>(impl);
}

}  // namespace pt
