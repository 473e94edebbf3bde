#include "kernels/cpu/moe.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "common/error.h"

namespace tandem::kernels {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// The layer's counters, one cache line each, then one per active expert
// (its A tasks done) and one per piece of the weighted sum (the B tasks
// done that write its columns). kRouted: the task list is written.
enum Counter : int64_t { kNextToken, kConverted, kRouted, kNextTask, kNextSum, kCounters };
// Columns of the weighted sum per piece of work.
constexpr int64_t kSumCols = 512;

struct Task {
  int32_t expert;  // index into the active-expert list
  int32_t kind;    // 0: A (gate/up chunk), 1: B (down chunk)
  int32_t row_begin, row_end;  // of F (A) or H (B)
};

// The down projections of the last kTailExperts experts go in the smallest
// tasks (kTailTaskBytes, two at least each): they are the layer's tail,
// which one thread would otherwise finish alone while the other waits. A
// thread out of tasks meanwhile sums the columns whose down rows are done.
constexpr int64_t kTailExperts = 2;

// Expert e's down tasks follow expert e + kDownLag's gate/up tasks in the
// list. With a lag of 1, a layer of one task of each per expert (Qwen3-30B-
// A3B's Q4_K at batch 1: 1.8 MB of gate/up, 0.9 MB of down) ended with one
// thread on the last gate/up while the other finished the down before it
// and then waited, and then ran the last down alone: with 2, the last
// gate/up meets two downs. On a Zen 5 EPYC (two threads, batch 1, quiet
// reads, alternated by repetition) that layer went from 0.776-0.780 of the
// read to 0.823-0.831; the other types and DeepSeek-V3's shapes moved within
// -1.5% to +1%, batches 8 and 256 within -2% to +2.5%; a lag of 3 gave no more, nor did
// smaller tasks for the tail's downs (stop 39).
constexpr int64_t kDownLag = 2;

// Byte offsets of everything moe_forward keeps in the workspace.
struct Layout {
  size_t xa_row, ha_row;  // converted activation rows (gate/up input, down input)
  int64_t pa, pb;         // activation rows per token (2: split bf16) of gate/up, of down
  int64_t chunk_a, chunk_b, tasks_a, tasks_b;
  int64_t tail_chunk_b;  // the down chunk of the smallest tasks (kTailExperts)
  int64_t n_sums;        // pieces of kSumCols columns in the weighted sum
  size_t xa, counts, slot_token, slot_of, a_rows, g, u, ha, yd, active, tasks, sum_need, sync, total;
};

// Weight bytes per task. The kernels split a task's rows into two to four
// streams from its parts, and longer, further-apart streams read faster:
// one process, two threads, 1 against 4 MiB tasks alternating, batch 1 of
// DeepSeek-V3 shapes 1.02-1.09x (BF16, FP8, Q8_0; Q4_K 0.99-1.04x), 256
// tokens in BF16 1.07-1.11x, Qwen3-30B-A3B batch 1 1.00-1.11x. The layer
// takes the largest size that still leaves kTasksPerThread tasks per thread
// (a batch-1 Qwen3 Q4_K layer is 21 MB: 1.3 MiB with two threads).
constexpr double kMinTaskBytes = 1 << 20, kMaxTaskBytes = 4 << 20;
constexpr double kTasksPerThread = 8;
// A prefill's experts (kPrefillTokens or more tokens each on average) take
// tasks of up to kMaxPrefillTaskBytes: fewer tiles start cold streams, and a
// layer of such experts still has tasks for every thread many times over.
// Two threads, 256 tokens, alternated by repetition with 4 MiB (stop 56,
// three runs): BF16 DeepSeek-V3 1.0-2.8% and Qwen3-30B-A3B 2.7-11% faster,
// FP8 -0.9% to +2.8%, Q4_K -1.1% to +1.7%; at 32 tokens (1.5-2.2 tokens an
// expert) 16 MiB tasks were up to 3% slower, so smaller batches keep 4 MiB.
constexpr double kMaxPrefillTaskBytes = 16 << 20;
constexpr int64_t kPrefillTokens = 8;
// The tail's pieces. Stop 43, alternated by repetition in one process with
// the tail in 1 MiB chunks and every piece of the sum waiting for all down
// tasks (two threads, batch 1): the time from the last task's end to the
// layer's end 5.3-5.6 -> 1.8-3.1 us (Qwen3-30B-A3B), 17 -> 11-16 us
// (DeepSeek-V3); the threads' last task ends apart by Qwen3 Q4_K 15.7 ->
// 7.0 us, Q8_0 8.3 -> 6.9, BF16 12.8 -> 5.4, DeepSeek-V3 BF16 16.5 -> 2.8,
// FP8 15.5 -> 5.5. Even halves of a 1 MiB chunk instead left Qwen3's FP8
// and Q8_0 12.6-15.2 us apart (their old 1 MiB chunks ended in a smaller
// piece).
constexpr double kTailTaskBytes = 512 << 10;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
int64_t ceil_div(int64_t v, int64_t m) { return (v + m - 1) / m; }

// Activation rows per token for weights of type t: 2 where bf16 ones are split.
int64_t pieces(const MoeShape& s, DType t) {
  return s.split_bf16_activations && row_dot_activation_type(t) == DType::kBF16 ? 2 : 1;
}

// n rows of f32 activations in the format of `wtype`, `pieces` rows each
// (pieces(): 2 for split bf16, hi and lo).
void convert_activations(int64_t n_pieces, DType wtype, const float* x, size_t x_row_stride, int64_t n,
                         int64_t cols, uint8_t* out, size_t out_row_bytes, CpuIsa isa, WeightLayout layout) {
  if (n_pieces == 2)
    convert_row_dot_activations_split(wtype, x, x_row_stride, n, cols, out, out_row_bytes, isa);
  else
    convert_row_dot_activations(wtype, x, x_row_stride, n, cols, out, out_row_bytes, isa, layout);
}

double expert_bytes(const MoeShape& s) {
  return 2.0 * double(*bytes_for(s.gate_up_type, uint64_t(s.hidden))) * double(s.ffn) +
         double(*bytes_for(s.down_type, uint64_t(s.ffn))) * double(s.hidden);
}

// Down rows a B task takes a multiple of: whole tiles (task_rows: pairs of
// x4 and q8_0_x16 groups, triples of bf16_x16 groups, fours of fp8_x16
// groups, FP8's 16-row amx tiles).
int64_t down_step(const MoeShape& s) { return std::lcm<int64_t>(4, task_rows(s.down_layout, s.down_type)); }

// Chunks of about task_bytes of weights.
void size_tasks(const MoeShape& s, double task_bytes, Layout& l) {
  // A chunks are whole blocks of the down type and of its activation format,
  // so each A task converts its own part of the down input.
  const int64_t block = std::max<int64_t>(info(s.down_type).block_elems,
                                          info(row_dot_activation_type(s.down_type)).block_elems);
  const double gu_row = double(*bytes_for(s.gate_up_type, uint64_t(s.hidden)));
  const double d_row = double(*bytes_for(s.down_type, uint64_t(s.ffn)));
  // Tasks take whole tiles (task_rows, as down_step).
  const int64_t a_step = std::lcm<int64_t>(block, task_rows(s.gate_up_layout, s.gate_up_type));
  const int64_t b_step = down_step(s);
  l.chunk_a = round_up(std::max<int64_t>(16, int64_t(task_bytes / (2 * gu_row))), a_step);
  l.chunk_a = std::min(l.chunk_a, round_up(s.ffn, a_step));
  l.chunk_b = round_up(std::max<int64_t>(16, int64_t(task_bytes / d_row)), b_step);
  l.chunk_b = std::min(l.chunk_b, round_up(s.hidden, b_step));
  l.tasks_a = (s.ffn + l.chunk_a - 1) / l.chunk_a;
  l.tasks_b = (s.hidden + l.chunk_b - 1) / l.chunk_b;
}

// moe_forward keeps the layouts of its last calls at the workspace's start,
// keyed by everything they depend on, so the layers of a decode step skip
// the shape checks and the layout's arithmetic: cold code after a layer has
// streamed its weights through the caches. Qwen3-30B-A3B at batch 1 (two
// threads, alternated by repetition in one process): the first task starts
// 1.4-1.5 us sooner, of 300 us (Q4_K) to 1 ms (BF16). Four entries: a
// worker's layers may take two shapes (Q4_K_M files keep some downs in Q6_K).
struct CachedLayout {
  uint64_t magic;
  MoeShape shape;
  int64_t n_tokens, top_k;
  size_t workspace_bytes;
  Layout layout;
};
constexpr uint64_t kCachedLayoutMagic = 0x54414e44454d4c31ull;  // "TANDEML1"
constexpr int kCachedLayouts = 4;
// The entries, then the next one to replace.
constexpr size_t kCacheBytes = align_up(sizeof(CachedLayout) * kCachedLayouts + sizeof(uint32_t));

Layout layout(const MoeShape& s, int64_t max_tokens, int top_k) {
  Layout l{};
  const int64_t n_assign = max_tokens * top_k;
  const int64_t max_active = std::min<int64_t>(s.n_experts, n_assign);
  l.xa_row = row_dot_activation_bytes(s.gate_up_type, s.hidden);
  l.ha_row = row_dot_activation_bytes(s.down_type, s.ffn);
  l.pa = pieces(s, s.gate_up_type);
  l.pb = pieces(s, s.down_type);
  // The tail's down rows in equal pieces of about kTailTaskBytes, two at least.
  size_tasks(s, kTailTaskBytes, l);
  const int64_t tail_pieces = std::max<int64_t>(2, l.tasks_b);
  l.tail_chunk_b = round_up(ceil_div(s.hidden, tail_pieces), down_step(s));
  size_tasks(s, kMinTaskBytes, l);  // the most tasks: room for any call's list
  l.n_sums = ceil_div(s.hidden, kSumCols);
  size_t at = kCacheBytes;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at = align_up(at + bytes);
    return here;
  };
  l.xa = take(l.xa_row * size_t(max_tokens * l.pa));
  l.counts = take(sizeof(int32_t) * size_t(s.n_experts + 1));
  l.slot_token = take(sizeof(int32_t) * size_t(n_assign));
  l.slot_of = take(sizeof(int32_t) * size_t(n_assign));
  l.a_rows = take(sizeof(const uint8_t*) * size_t(n_assign * l.pa));
  l.g = take(sizeof(float) * size_t(n_assign * l.pa * s.ffn));
  l.u = take(sizeof(float) * size_t(n_assign * l.pa * s.ffn));
  l.ha = take(l.ha_row * size_t(n_assign * l.pb));
  l.yd = take(sizeof(float) * size_t(n_assign * l.pb * s.hidden));
  l.active = take(sizeof(int32_t) * 2 * size_t(max_active));  // expert id, first slot
  l.tasks = take(sizeof(Task) * size_t(max_active * (l.tasks_a + l.tasks_b) + kTailExperts * tail_pieces));
  l.sum_need = take(sizeof(int32_t) * size_t(l.n_sums));
  l.sync = take(kAlign * size_t(kCounters + max_active + l.n_sums));
  l.total = at;
  return l;
}

// Asks for the workspace's bookkeeping lines (the routing's arrays, the task
// list, the counters) all at once: the layer before has streamed its weights
// through the caches, and touched one array after another they cost a miss
// each in turn.
void warm_workspace(const Layout& l, int64_t n_experts, uint8_t* ws) {
  constexpr size_t kMaxBytes = 16 << 10;  // a batch of a few tokens; more is worth less
  // The empty asm keeps the loop: GCC counts a prefetch as no effect, and
  // C++ lets a loop without effects be deleted (-ffinite-loops), as these
  // were until stop 51 (moe.o held no prefetch; prefetch_kept_test.sh
  // checks). Restored, the layer's times at batch 1 moved less than the
  // bench's noise.
  auto warm = [&](size_t from, size_t to) {
    for (size_t o = from; o < std::min(to, from + kMaxBytes); o += kAlign) {
      __builtin_prefetch(ws + o, 1, 3);
      asm volatile("" : : "r"(ws + o));
    }
  };
  warm(l.counts, l.g);
  warm(l.yd, l.yd + sizeof(int32_t) * size_t(n_experts));  // route()'s cursors
  warm(l.active, l.total);
}

struct Job {
  const MoeKernels* k;
  const MoeShape* s;
  const MoeExpert* experts;
  const MoeBatch* b;
  Layout* l;  // route() sizes the tasks
  uint8_t* ws;
  int pool_size;
  // Written by route() on thread 0 before kRouted; read by all after it.
  int64_t n_active = 0, n_tasks = 0;

  template <class T>
  T* at(size_t off) const { return reinterpret_cast<T*>(ws + off); }
  std::atomic_ref<int64_t> counter(int64_t i) const {
    return std::atomic_ref<int64_t>(*reinterpret_cast<int64_t*>(ws + l->sync + kAlign * size_t(i)));
  }
  std::atomic_ref<int64_t> done_a(int64_t e) const { return counter(kCounters + e); }
  std::atomic_ref<int64_t> sum_ready(int64_t c) const { return counter(kCounters + n_active + c); }

  static void wait_until(std::atomic_ref<int64_t> c, int64_t want) {
    while (c.load(std::memory_order_acquire) < want) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }

  RowDotParams rows(DType type, const uint8_t* w, size_t stride, int64_t n_rows, int64_t cols,
                    const float* scales, size_t scale_stride) const {
    RowDotParams p;
    p.wtype = type;
    p.w = w;
    p.w_row_stride = stride;
    p.rows = n_rows;
    p.cols = cols;
    p.scales = scales;
    p.scale_row_stride = scale_stride;
    return p;
  }

  void task_a(int64_t e_idx, int64_t f0, int64_t f1) const {
    const int32_t* active = at<int32_t>(l->active);
    const int64_t e = active[2 * e_idx], s0 = active[2 * e_idx + 1];
    const int64_t m = at<int32_t>(l->counts)[e + 1] - at<int32_t>(l->counts)[e];
    const MoeExpert& x = experts[e];
    const int64_t pa = l->pa, F = s->ffn;
    float* g = at<float>(l->g) + size_t(s0 * pa * F);
    float* u = at<float>(l->u) + size_t(s0 * pa * F);
    RowDotParams p = rows(s->gate_up_type, x.gate, s->gate_up_row_stride, s->ffn, s->hidden,
                          x.gate_scales, s->gate_up_scale_stride);
    p.a_rows = at<const uint8_t*>(l->a_rows) + s0 * pa;
    p.n_tokens = m * pa;
    p.y = g;
    p.y_row_stride = size_t(s->ffn);
    p.row_begin = f0;
    p.row_end = f1;
    p.layout = s->gate_up_layout;
    p.fp8_marks = x.gate_marks;
    if (layout_takes_pairs(p.layout)) {  // gate and up in one call (RowDotParams::pair_w)
      p.pair_w = x.up;
      p.pair_y = u;
      k->gate_up(p);
    } else {
      p.then_rows = x.up + size_t(f0) * s->gate_up_row_stride;
      k->gate_up(p);
      p.then_rows = nullptr;
      p.w = x.up;
      p.scales = x.up_scales;
      p.fp8_marks = x.up_marks;
      p.y = u;
      k->gate_up(p);
    }
    const size_t tok = size_t(pa * F);  // floats from one token's g (or u) to the next's
    for (int64_t t = 0; t < m; ++t) {
      float* gt = g + t * tok + f0;
      float* ut = u + t * tok + f0;
      if (pa == 2) {  // hi row + lo row
        k->ops.add_scaled(gt, gt + F, 1.0f, f1 - f0);
        k->ops.add_scaled(ut, ut + F, 1.0f, f1 - f0);
      }
      k->ops.swiglu(gt, ut, f1 - f0);
    }
    const DType act = row_dot_activation_type(s->down_type);
    const size_t off = size_t(*bytes_for(act, uint64_t(f0)));
    convert_activations(l->pb, s->down_type, g + f0, tok, m, f1 - f0,
                        at<uint8_t>(l->ha) + size_t(s0 * l->pb) * l->ha_row + off, l->ha_row, k->isa,
                        s->down_layout);
  }

  void task_b(int64_t e_idx, int64_t h0, int64_t h1) const {
    wait_until(done_a(e_idx), l->tasks_a);
    const int32_t* active = at<int32_t>(l->active);
    const int64_t e = active[2 * e_idx], s0 = active[2 * e_idx + 1];
    const int64_t m = at<int32_t>(l->counts)[e + 1] - at<int32_t>(l->counts)[e];
    const MoeExpert& x = experts[e];
    RowDotParams p = rows(s->down_type, x.down, s->down_row_stride, s->hidden, s->ffn,
                          x.down_scales, s->down_scale_stride);
    p.layout = s->down_layout;
    p.fp8_marks = x.down_marks;
    const int64_t pb = l->pb, H = s->hidden;
    p.a = at<uint8_t>(l->ha) + size_t(s0 * pb) * l->ha_row;
    p.a_row_bytes = l->ha_row;
    p.n_tokens = m * pb;
    p.y = at<float>(l->yd) + size_t(s0 * pb * H);
    p.y_row_stride = size_t(H);
    p.row_begin = h0;
    p.row_end = h1;
    k->down(p);
    if (pb == 2)  // hi row + lo row, into the hi row
      for (int64_t t = 0; t < m; ++t)
        k->ops.add_scaled(p.y + size_t(2 * t * H) + h0, p.y + size_t((2 * t + 1) * H) + h0, 1.0f, h1 - h0);
  }

  // Groups the assignments by expert and writes the task list; thread 0
  // does this while the others convert the tokens.
  void route() {
    const MoeShape& sh = *s;
    const MoeBatch& bt = *b;
    Layout& ly = *l;
    const int64_t n_assign = bt.n_tokens * bt.top_k;
    // Group the assignments by expert (a counting sort, in token order).
    auto* counts = reinterpret_cast<int32_t*>(ws + ly.counts);
    auto* slot_token = reinterpret_cast<int32_t*>(ws + ly.slot_token);
    auto* slot_of = reinterpret_cast<int32_t*>(ws + ly.slot_of);
    auto* a_rows = reinterpret_cast<const uint8_t**>(ws + ly.a_rows);
    std::fill(counts, counts + sh.n_experts + 1, 0);
    for (int64_t i = 0; i < n_assign; ++i)
      if (bt.expert_ids[i] >= 0) ++counts[bt.expert_ids[i] + 1];
    for (int64_t e = 0; e < sh.n_experts; ++e) counts[e + 1] += counts[e];
    auto* active = reinterpret_cast<int32_t*>(ws + ly.active);
    n_active = 0;
    for (int64_t e = 0; e < sh.n_experts; ++e)
      if (counts[e + 1] > counts[e]) {
        active[2 * n_active] = int32_t(e);
        active[2 * n_active + 1] = counts[e];
        ++n_active;
      }
    {
      // fill slots: a running cursor per expert, kept in the yd area until it is used
      auto* cursor = reinterpret_cast<int32_t*>(ws + ly.yd);
      std::copy(counts, counts + sh.n_experts, cursor);
      for (int64_t i = 0; i < n_assign; ++i) {
        const int32_t e = bt.expert_ids[i];
        if (e < 0) {
          slot_of[i] = -1;
          continue;
        }
        const int32_t slot = cursor[e]++;
        slot_of[i] = slot;
        slot_token[slot] = int32_t(i / bt.top_k);
        for (int64_t p = 0; p < ly.pa; ++p)
          a_rows[slot * ly.pa + p] = ws + ly.xa + size_t((i / bt.top_k) * ly.pa + p) * ly.xa_row;
      }
    }
    const int64_t routed = counts[sh.n_experts];  // assignments to an expert
    const double max_task = routed >= kPrefillTokens * n_active ? kMaxPrefillTaskBytes : kMaxTaskBytes;
    size_tasks(sh,
               std::clamp(double(n_active) * expert_bytes(sh) / (kTasksPerThread * pool_size), kMinTaskBytes,
                          max_task),
               ly);
    // Task order (kDownLag 2): A(0) A(1) A(2) B(0) A(3) B(1) ... B(n-2) B(n-1).
    auto* tasks = reinterpret_cast<Task*>(ws + ly.tasks);
    auto* sum_need = reinterpret_cast<int32_t*>(ws + ly.sum_need);
    std::fill(sum_need, sum_need + ly.n_sums, 0);
    n_tasks = 0;
    auto add_a = [&](int64_t e) {
      for (int64_t f0 = 0; f0 < sh.ffn; f0 += ly.chunk_a)
        tasks[n_tasks++] = {int32_t(e), 0, int32_t(f0), int32_t(std::min(sh.ffn, f0 + ly.chunk_a))};
    };
    auto add_b = [&](int64_t e) {
      const int64_t chunk = e >= n_active - kTailExperts ? ly.tail_chunk_b : ly.chunk_b;
      for (int64_t h0 = 0; h0 < sh.hidden; h0 += chunk) {
        const int64_t h1 = std::min(sh.hidden, h0 + chunk);
        tasks[n_tasks++] = {int32_t(e), 1, int32_t(h0), int32_t(h1)};
        for (int64_t c = h0 / kSumCols; c * kSumCols < h1; ++c) ++sum_need[c];
      }
    };
    for (int64_t e = 0; e < n_active; ++e) {
      add_a(e);
      if (e >= kDownLag) add_b(e - kDownLag);
    }
    for (int64_t e = std::max<int64_t>(0, n_active - kDownLag); e < n_active; ++e) add_b(e);
    std::memset(ws + ly.sync + kAlign * kCounters, 0, kAlign * size_t(n_active + ly.n_sums));
    counter(kRouted).store(1, std::memory_order_release);
  }

  // Run with ThreadPool::run_shared: every step takes its work from a
  // counter and waits only for the steps it reads, so the first thread
  // starts at once and one that wakes late joins where the others are.
  void operator()(int index, int /*n_threads*/) {
    if (index == 0) route();
    // 1. convert the tokens, one at a time
    for (int64_t t = counter(kNextToken).fetch_add(1, std::memory_order_relaxed); t < b->n_tokens;
         t = counter(kNextToken).fetch_add(1, std::memory_order_relaxed)) {
      convert_activations(l->pa, s->gate_up_type, b->x + size_t(t) * b->x_row_stride, 0, 1, s->hidden,
                          at<uint8_t>(l->xa) + size_t(t * l->pa) * l->xa_row, l->xa_row, k->isa,
                          s->gate_up_layout);
      counter(kConverted).fetch_add(1, std::memory_order_acq_rel);
    }
    wait_until(counter(kConverted), b->n_tokens);
    wait_until(counter(kRouted), 1);
    // 2. tasks
    const Task* tasks = at<Task>(l->tasks);
    for (int64_t i = counter(kNextTask).fetch_add(1, std::memory_order_relaxed); i < n_tasks;
         i = counter(kNextTask).fetch_add(1, std::memory_order_relaxed)) {
      const Task& t = tasks[i];
      if (t.kind == 0) {
        task_a(t.expert, t.row_begin, t.row_end);
        done_a(t.expert).fetch_add(1, std::memory_order_acq_rel);
      } else {
        task_b(t.expert, t.row_begin, t.row_end);
        for (int64_t c = t.row_begin / kSumCols; c * kSumCols < t.row_end; ++c)
          sum_ready(c).fetch_add(1, std::memory_order_acq_rel);
      }
    }
    // 3. the weighted sum, kSumCols columns of every token at a time, each
    // piece once the down tasks that write its columns are done (a thread
    // out of tasks sums the pieces the others' last tasks do not touch)
    const int64_t H = s->hidden;
    const int32_t* slot_of = at<int32_t>(l->slot_of);
    const int32_t* sum_need = at<int32_t>(l->sum_need);
    const float* yd = at<float>(l->yd);
    for (int64_t c = counter(kNextSum).fetch_add(1, std::memory_order_relaxed); c < l->n_sums;
         c = counter(kNextSum).fetch_add(1, std::memory_order_relaxed)) {
      wait_until(sum_ready(c), sum_need[c]);
      const int64_t c0 = c * kSumCols, c1 = std::min(H, c0 + kSumCols);
      for (int64_t t = 0; t < b->n_tokens; ++t) {
        float* y = b->y + size_t(t) * b->y_row_stride;
        std::fill(y + c0, y + c1, 0.0f);
        for (int k2 = 0; k2 < b->top_k; ++k2) {
          const int32_t slot = slot_of[t * b->top_k + k2];
          if (slot < 0) continue;
          const float w = b->expert_weights[t * b->top_k + k2];
          k->ops.add_scaled(y + c0, yd + size_t(slot * l->pb) * size_t(H) + c0, w, c1 - c0);
        }
      }
    }
  }
};

}  // namespace

void moe_check_shape(const MoeShape& s) {
  if (s.hidden <= 0 || s.ffn <= 0 || s.n_experts <= 0)
    fail_invalid("moe layer: hidden {}, ffn {}, {} experts (all must be positive)", s.hidden,
                 s.ffn, s.n_experts);
  row_dot_activation_bytes(s.gate_up_type, s.hidden);  // throws with the cause
  row_dot_activation_bytes(s.down_type, s.ffn);
  if (s.gate_up_row_stride < *bytes_for(s.gate_up_type, uint64_t(s.hidden)) ||
      s.down_row_stride < *bytes_for(s.down_type, uint64_t(s.ffn)))
    fail(ErrorKind::kInternal, "moe layer: row strides {} / {} smaller than a row",
         s.gate_up_row_stride, s.down_row_stride);
  auto check_layout = [](const char* what, WeightLayout l, DType t, int64_t rows, int64_t cols, size_t stride) {
    if (l != WeightLayout::kRowMajor && (!layout_fits(l, t, rows, cols) || stride != *bytes_for(t, uint64_t(cols))))
      fail_invalid("moe layer: {} is stored as {}, which cannot hold {} x {} {} with a row stride of {} bytes",
                   what, layout_name(l), rows, cols, name(t), stride);
  };
  check_layout("gate/up", s.gate_up_layout, s.gate_up_type, s.ffn, s.hidden, s.gate_up_row_stride);
  check_layout("down", s.down_layout, s.down_type, s.hidden, s.ffn, s.down_row_stride);
}

MoeKernels moe_kernels(CpuIsa isa, const MoeShape& s) {
  moe_check_shape(s);
  return {row_dot_for(isa, s.gate_up_type), row_dot_for(isa, s.down_type),
          row_dot_level(isa, s.gate_up_type), row_dot_level(isa, s.down_type), isa,
          vec_ops_for(isa)};
}

size_t moe_workspace_bytes(const MoeShape& s, int64_t max_tokens, int top_k) {
  moe_check_shape(s);
  if (max_tokens < 0 || top_k <= 0)
    fail(ErrorKind::kInternal, "moe layer: {} tokens, top_k {}", max_tokens, top_k);
  return layout(s, max_tokens, top_k).total;
}

namespace {

// The call's layout: from the workspace's cache, or checked, computed and
// cached there.
Layout call_layout(const MoeShape& s, const MoeBatch& b, uint8_t* ws, size_t workspace_bytes) {
  CachedLayout c;
  if (workspace_bytes >= kCacheBytes)
    for (int i = 0; i < kCachedLayouts; ++i) {
      std::memcpy(&c, ws + sizeof(CachedLayout) * size_t(i), sizeof c);
      if (c.magic == kCachedLayoutMagic && c.n_tokens == b.n_tokens && c.top_k == b.top_k &&
          c.workspace_bytes == workspace_bytes && c.shape == s)
        return c.layout;
    }
  moe_check_shape(s);
  c = {kCachedLayoutMagic, s, b.n_tokens, b.top_k, workspace_bytes, layout(s, b.n_tokens, b.top_k)};
  if (workspace_bytes < c.layout.total)
    fail(ErrorKind::kInternal, "moe layer: workspace of {} bytes, {} needed", workspace_bytes,
         c.layout.total);
  uint32_t next;
  std::memcpy(&next, ws + sizeof(CachedLayout) * kCachedLayouts, sizeof next);
  next %= kCachedLayouts;
  std::memcpy(ws + sizeof(CachedLayout) * next, &c, sizeof c);
  next = (next + 1) % kCachedLayouts;
  std::memcpy(ws + sizeof(CachedLayout) * kCachedLayouts, &next, sizeof next);
  return c.layout;
}

}  // namespace

void moe_forward(const MoeKernels& k, ThreadPool& pool, const MoeShape& s,
                 const MoeExpert* experts, const MoeBatch& b, void* workspace,
                 size_t workspace_bytes) {
  if (b.n_tokens == 0) {
    moe_check_shape(s);
    return;
  }
  if (!k.gate_up || !k.down || !experts || !b.x || !b.expert_ids || !b.expert_weights || !b.y ||
      b.top_k <= 0 || !workspace)
    fail(ErrorKind::kInternal, "moe layer: missing kernels, experts, batch pointers or workspace");
  auto* ws = static_cast<uint8_t*>(workspace);
  Layout l = call_layout(s, b, ws, workspace_bytes);
  warm_workspace(l, s.n_experts, ws);
  const int64_t n_assign = b.n_tokens * b.top_k;
  for (int64_t i = 0; i < n_assign; ++i) {
    const int32_t e = b.expert_ids[i];
    if (e < -1 || e >= s.n_experts)
      fail_invalid("moe layer: token {} routed to expert {} of {}", i / b.top_k, e, s.n_experts);
    if (e >= 0 && !std::isfinite(b.expert_weights[i]))
      fail_invalid("moe layer: token {} has routing weight {} for expert {}", i / b.top_k,
                   b.expert_weights[i], e);
  }
  std::memset(ws + l.sync, 0, kAlign * kCounters);
  Job job{&k, &s, experts, &b, &l, ws, pool.size()};
  pool.run_shared(job);
}

MoeRouteStats moe_route_stats(const MoeShape& s, const MoeBatch& b) {
  MoeRouteStats st;
  std::vector<bool> used(size_t(s.n_experts), false);
  for (int64_t i = 0; i < b.n_tokens * b.top_k; ++i) {
    const int32_t e = b.expert_ids[i];
    if (e < 0 || e >= s.n_experts) continue;
    ++st.assignments;
    if (!used[size_t(e)]) {
      used[size_t(e)] = true;
      ++st.active_experts;
    }
  }
  st.weight_bytes = expert_bytes(s) * double(st.active_experts);
  return st;
}

}  // namespace tandem::kernels
