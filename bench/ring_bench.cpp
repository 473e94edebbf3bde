// tandem-bench-ring: activation rings between two processes, against memcpy
// and against ZeroMQ ipc://, for 16 KiB messages (a batch of hidden states).
//
//   tandem-bench-ring [--messages N] [--round-trips N] [--slots N] [--bytes N] [--repeat N]
//
// The writer/requester runs on CPU 0 and the reader/worker on CPU 1 (when
// the affinity mask allows). Every measurement runs in this one invocation,
// so the memcpy baseline shares the machine's state with the ring numbers.
//
// What each side does, per message:
//  memcpy:      one memcpy of the message into the next 16 KiB piece of a
//               buffer as large as the ring (one core, no peer). The
//               headline fraction divides by this.
//  memcpy, DRAM-sized: the same between two 512 MiB buffers: memcpy at
//               memory speed (a second baseline, printed beside).
//  memcpy in + out: the same, then a memcpy back out of that piece: the
//               ring's two copies on one core.
//  cross-core:  the writer's core fills the ring-sized buffer, then the
//               reader's core copies it out, in turns (no ring).
//  ring 1-way:  writer: reserve, one memcpy into the slot, publish.
//               reader: peek, one memcpy out of the slot into a private
//               buffer, release. Throughput = bytes / time until the reader
//               released the last message.
//  ring RTT:    requester: reserve on ring A, memcpy in, publish; peek on
//               ring B, memcpy out, release. worker: peek on A, one memcpy
//               from A's slot straight into a reserved slot of B, publish
//               B, release A. Both sides spin (RingOptions::spin = 1 s).
//  zmq 1-way:   PAIR sockets over ipc://, zmq_send of the buffer (zmq copies
//               it), zmq_recv into a private buffer; ack at the end.
//  zmq RTT:     send 16 KiB, the peer receives it and sends it back.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/error.h"
#include "common/ring/ring.h"
#include "common/shm/run_dir.h"

namespace {
using namespace tandem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Config {
  uint64_t messages = 200'000;
  uint64_t round_trips = 100'000;
  uint32_t slots = 16;
  uint32_t bytes = 16384;
  int repeat = 3;
};

bool g_pinned = false;
std::vector<int> g_cpus;  // the CPUs this process may use, read before pinning

void find_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) g_cpus.push_back(c);
}

// Pins the calling process to the index-th allowed CPU (the writer on the
// first, the reader on the second). Forked children inherit the parent's
// pinned mask, hence the list read once at start.
void pin(size_t index) {
  if (g_cpus.size() < 2) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(g_cpus[index], &one);
  g_pinned = sched_setaffinity(0, sizeof one, &one) == 0;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Runs fn in a forked child pinned to CPU 1; the child _exits. The returned
// pipe fd delivers the child's one "ready" byte.
template <typename Fn>
std::pair<pid_t, int> spawn(Fn&& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error(ErrorKind::kSystem, "pipe");
  std::fflush(nullptr);  // or the child inherits, and may repeat, buffered output
  pid_t pid = ::fork();
  if (pid < 0) throw Error(ErrorKind::kSystem, "fork");
  if (pid == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    pin(1);
    int rc = 0;
    try {
      fn(fds[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench child: %s\n", e.what());
      rc = 1;
    }
    ::_exit(rc);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

void ready(int fd) {
  char c = 1;
  (void)!::write(fd, &c, 1);
  ::close(fd);
}

void await(int fd) {
  char c;
  if (::read(fd, &c, 1) != 1) throw Error(ErrorKind::kSystem, "bench child failed to start");
  ::close(fd);
}

void reap(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(ErrorKind::kInternal, fmt::format("bench child failed (status {})", status));
}

RingOptions spinning() {
  RingOptions o;
  o.spin = 1s;  // benchmark: both sides own a core, never sleep
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double percentile(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

// GB/s of one memcpy per message into a ring-sized buffer.
double memcpy_gbps(const Config& cfg) {
  std::vector<std::byte> src(cfg.bytes, std::byte{1});
  std::vector<std::byte> ring(size_t(cfg.slots) * cfg.bytes);
  std::memset(ring.data(), 0, ring.size());
  auto start = Clock::now();
  for (uint64_t i = 0; i < cfg.messages; ++i) {
    std::memcpy(ring.data() + (i % cfg.slots) * cfg.bytes, src.data(), cfg.bytes);
    asm volatile("" ::"r"(ring.data()) : "memory");  // keep every copy
  }
  return double(cfg.messages) * cfg.bytes / seconds(Clock::now() - start) / 1e9;
}

// GB/s of one memcpy per message between buffers far larger than the caches
// (512 MiB each, one core): memcpy at DRAM speed, the other reading of "move
// activations at memory speed". Best of 3 passes after a warm-up touch.
double memcpy_dram_gbps(const Config& cfg) {
  const size_t n = (size_t(512) << 20) / cfg.bytes * cfg.bytes;
  std::vector<std::byte> src(n, std::byte{1}), dst(n, std::byte{0});
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    auto start = Clock::now();
    for (size_t off = 0; off < n; off += cfg.bytes) {
      std::memcpy(dst.data() + off, src.data() + off, cfg.bytes);
      asm volatile("" ::"r"(dst.data()) : "memory");
    }
    best = std::max(best, double(n) / seconds(Clock::now() - start) / 1e9);
  }
  return best;
}

// GB/s of messages copied through a ring-sized buffer on one core: the
// same two copies the ring makes (into a slot, out of it), without a second
// core: memcpy in, then memcpy out, per message.
double memcpy_through_gbps(const Config& cfg) {
  std::vector<std::byte> src(cfg.bytes, std::byte{1}), dst(cfg.bytes);
  std::vector<std::byte> ring(size_t(cfg.slots) * cfg.bytes);
  std::memset(ring.data(), 0, ring.size());
  auto start = Clock::now();
  for (uint64_t i = 0; i < cfg.messages; ++i) {
    std::byte* slot = ring.data() + (i % cfg.slots) * cfg.bytes;
    std::memcpy(slot, src.data(), cfg.bytes);
    asm volatile("" ::"r"(slot) : "memory");
    std::memcpy(dst.data(), slot, cfg.bytes);
    asm volatile("" ::"r"(dst.data()) : "memory");
  }
  return double(cfg.messages) * cfg.bytes / seconds(Clock::now() - start) / 1e9;
}

// GB/s of moving 16 KiB pieces from one core to the other with two plain
// memcpys and no ring: the writer's core copies a ring-sized buffer full,
// then the reader's core copies it all out, in turns (no overlap). Both
// copies touch lines the other core holds, which is what the ring must do
// too; the ring may beat this by overlapping the two sides.
double cross_core_gbps(const Config& cfg) {
  size_t bytes = size_t(cfg.slots) * cfg.bytes;
  struct Shared {
    std::atomic<uint64_t> turn{0};  // odd: the reader's turn
  };
  void* mem = ::mmap(nullptr, sizeof(Shared) + 4096 + bytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw Error(ErrorKind::kSystem, "mmap");
  auto* shared = new (mem) Shared();
  std::byte* buf = static_cast<std::byte*>(mem) + 4096;
  uint64_t rounds = std::max<uint64_t>(1, cfg.messages / cfg.slots);
  auto [pid, fd] = spawn([&](int ready_fd) {
    std::vector<std::byte> out(cfg.bytes);
    ready(ready_fd);
    for (uint64_t r = 0; r < rounds; ++r) {
      while (shared->turn.load(std::memory_order_acquire) != 2 * r + 1) {
      }
      for (uint32_t i = 0; i < cfg.slots; ++i) {
        std::memcpy(out.data(), buf + size_t(i) * cfg.bytes, cfg.bytes);
        asm volatile("" ::"r"(out.data()) : "memory");
      }
      shared->turn.store(2 * r + 2, std::memory_order_release);
    }
  });
  await(fd);
  std::vector<std::byte> src(cfg.bytes, std::byte{6});
  auto start = Clock::now();
  for (uint64_t r = 0; r < rounds; ++r) {
    while (shared->turn.load(std::memory_order_acquire) != 2 * r) {
    }
    for (uint32_t i = 0; i < cfg.slots; ++i)
      std::memcpy(buf + size_t(i) * cfg.bytes, src.data(), cfg.bytes);
    shared->turn.store(2 * r + 1, std::memory_order_release);
  }
  while (shared->turn.load(std::memory_order_acquire) != 2 * rounds) {
  }
  double gbps = double(rounds) * double(bytes) / seconds(Clock::now() - start) / 1e9;
  reap(pid);
  ::munmap(mem, sizeof(Shared) + 4096 + bytes);
  return gbps;
}

double ring_gbps(const Config& cfg, RunDirectory& run, int trial) {
  std::string path = run.file("oneway-" + std::to_string(trial));
  auto file = std::make_shared<const RingFile>(RingFile::create(path, {cfg.slots, cfg.bytes}));
  RingWriter writer = RingWriter::attach(file, spinning());
  auto [pid, fd] = spawn([&](int ready_fd) {
    RingReader reader = RingReader::attach(path, spinning());
    std::vector<std::byte> out(cfg.bytes);
    ready(ready_fd);
    for (uint64_t i = 0; i < cfg.messages; ++i) {
      RingMessage m = reader.peek(deadline_in(30s));
      std::memcpy(out.data(), m.bytes.data(), m.bytes.size());
      asm volatile("" ::"r"(out.data()) : "memory");
      reader.release();
    }
  });
  await(fd);
  std::vector<std::byte> src(cfg.bytes, std::byte{2});
  auto start = Clock::now();
  for (uint64_t i = 0; i < cfg.messages; ++i) {
    std::memcpy(writer.reserve(deadline_in(30s)).data(), src.data(), cfg.bytes);
    writer.publish(cfg.bytes);
  }
  while (writer.released_sequence() < cfg.messages) {
  }
  double gbps = double(cfg.messages) * cfg.bytes / seconds(Clock::now() - start) / 1e9;
  reap(pid);
  return gbps;
}

// Round-trip times in microseconds.
std::vector<double> ring_rtt(const Config& cfg, RunDirectory& run) {
  std::string ping = run.file("ping"), pong = run.file("pong");
  auto a = std::make_shared<const RingFile>(RingFile::create(ping, {cfg.slots, cfg.bytes}));
  auto b = std::make_shared<const RingFile>(RingFile::create(pong, {cfg.slots, cfg.bytes}));
  uint64_t warmup = std::min<uint64_t>(1000, cfg.round_trips);
  uint64_t total = cfg.round_trips + warmup;
  auto [pid, fd] = spawn([&](int ready_fd) {
    RingReader in = RingReader::attach(ping, spinning());
    RingWriter out = RingWriter::attach(pong, spinning());
    ready(ready_fd);
    for (uint64_t i = 0; i < total; ++i) {
      RingMessage m = in.peek(deadline_in(30s));
      std::memcpy(out.reserve(deadline_in(30s)).data(), m.bytes.data(), m.bytes.size());
      out.publish(m.bytes.size());
      in.release();
    }
  });
  RingWriter out = RingWriter::attach(a, spinning());
  RingReader in = RingReader::attach(b, spinning());
  await(fd);
  std::vector<std::byte> src(cfg.bytes, std::byte{3}), dst(cfg.bytes);
  std::vector<double> rtt;
  rtt.reserve(cfg.round_trips);
  for (uint64_t i = 0; i < total; ++i) {
    auto t0 = Clock::now();
    std::memcpy(out.reserve(deadline_in(30s)).data(), src.data(), cfg.bytes);
    out.publish(cfg.bytes);
    RingMessage m = in.peek(deadline_in(30s));
    std::memcpy(dst.data(), m.bytes.data(), m.bytes.size());
    in.release();
    auto t1 = Clock::now();
    if (i >= warmup) rtt.push_back(seconds(t1 - t0) * 1e6);
  }
  reap(pid);
  return rtt;
}

double zmq_gbps(const Config& cfg, const std::string& endpoint) {
  auto [pid, fd] = spawn([&](int ready_fd) {
    zmq::context_t ctx(1);
    zmq::socket_t sock(ctx, zmq::socket_type::pair);
    sock.bind(endpoint);
    ready(ready_fd);
    std::vector<std::byte> out(cfg.bytes);
    for (uint64_t i = 0; i < cfg.messages; ++i)
      (void)sock.recv(zmq::buffer(out.data(), out.size()), zmq::recv_flags::none);
    char ack = 1;
    sock.send(zmq::buffer(&ack, 1), zmq::send_flags::none);
  });
  await(fd);
  zmq::context_t ctx(1);
  zmq::socket_t sock(ctx, zmq::socket_type::pair);
  sock.connect(endpoint);
  std::vector<std::byte> src(cfg.bytes, std::byte{4});
  auto start = Clock::now();
  for (uint64_t i = 0; i < cfg.messages; ++i)
    sock.send(zmq::buffer(src.data(), src.size()), zmq::send_flags::none);
  char ack = 0;
  (void)sock.recv(zmq::buffer(&ack, 1), zmq::recv_flags::none);
  double gbps = double(cfg.messages) * cfg.bytes / seconds(Clock::now() - start) / 1e9;
  reap(pid);
  return gbps;
}

std::vector<double> zmq_rtt(const Config& cfg, const std::string& endpoint) {
  uint64_t warmup = std::min<uint64_t>(1000, cfg.round_trips);
  uint64_t total = cfg.round_trips + warmup;
  auto [pid, fd] = spawn([&](int ready_fd) {
    zmq::context_t ctx(1);
    zmq::socket_t sock(ctx, zmq::socket_type::pair);
    sock.bind(endpoint);
    ready(ready_fd);
    std::vector<std::byte> buf(cfg.bytes);
    for (uint64_t i = 0; i < total; ++i) {
      (void)sock.recv(zmq::buffer(buf.data(), buf.size()), zmq::recv_flags::none);
      sock.send(zmq::buffer(buf.data(), buf.size()), zmq::send_flags::none);
    }
  });
  await(fd);
  zmq::context_t ctx(1);
  zmq::socket_t sock(ctx, zmq::socket_type::pair);
  sock.connect(endpoint);
  std::vector<std::byte> src(cfg.bytes, std::byte{5}), dst(cfg.bytes);
  std::vector<double> rtt;
  rtt.reserve(cfg.round_trips);
  for (uint64_t i = 0; i < total; ++i) {
    auto t0 = Clock::now();
    sock.send(zmq::buffer(src.data(), src.size()), zmq::send_flags::none);
    (void)sock.recv(zmq::buffer(dst.data(), dst.size()), zmq::recv_flags::none);
    auto t1 = Clock::now();
    if (i >= warmup) rtt.push_back(seconds(t1 - t0) * 1e6);
  }
  reap(pid);
  return rtt;
}

uint64_t arg(int argc, char** argv, const char* name, uint64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  cfg.messages = arg(argc, argv, "--messages", cfg.messages);
  cfg.round_trips = arg(argc, argv, "--round-trips", cfg.round_trips);
  cfg.slots = uint32_t(arg(argc, argv, "--slots", cfg.slots));
  cfg.bytes = uint32_t(arg(argc, argv, "--bytes", cfg.bytes));
  cfg.repeat = int(std::max<uint64_t>(1, arg(argc, argv, "--repeat", uint64_t(cfg.repeat))));
  spdlog::set_level(spdlog::level::warn);  // no "attached" lines in the table
  try {
    RunDirectory run = RunDirectory::create();
    find_cpus();
    pin(0);
    std::printf("tandem-bench-ring: %u-byte messages, rings of %u slots (%u KiB), %llu messages "
                "one-way, %llu round trips, median of %d runs; %s\n",
                cfg.bytes, cfg.slots, cfg.slots * cfg.bytes / 1024,
                (unsigned long long)cfg.messages, (unsigned long long)cfg.round_trips, cfg.repeat,
                g_pinned ? fmt::format("writer/requester on CPU {}, reader/worker on CPU {}", g_cpus[0], g_cpus[1]).c_str()
                         : "NOT pinned (fewer than 2 CPUs allowed)");

    std::vector<double> mem, through, cross, ring, zmq_tp;
    const double dram_gbps = memcpy_dram_gbps(cfg);
    for (int r = 0; r < cfg.repeat; ++r) {
      mem.push_back(memcpy_gbps(cfg));
      through.push_back(memcpy_through_gbps(cfg));
      cross.push_back(cross_core_gbps(cfg));
      ring.push_back(ring_gbps(cfg, run, r));
    }
    std::vector<double> rtt = ring_rtt(cfg, run);
    std::string endpoint = "ipc://" + run.file("zmq.sock");
    // ZeroMQ moves the bytes through the kernel two orders of magnitude
    // slower: a quarter of the messages tells as much in less time.
    Config zcfg = cfg;
    zcfg.messages = std::max<uint64_t>(1000, cfg.messages / 4);
    zcfg.round_trips = std::max<uint64_t>(1000, cfg.round_trips / 4);
    for (int r = 0; r < cfg.repeat; ++r) zmq_tp.push_back(zmq_gbps(zcfg, endpoint));
    std::vector<double> zrtt = zmq_rtt(zcfg, endpoint);

    double mem_gbps = median(mem), through_gb = median(through), cross_gb = median(cross), ring_gb = median(ring), zmq_gb = median(zmq_tp);
    double p50 = percentile(rtt, 0.50), p99 = percentile(rtt, 0.99);
    double zp50 = percentile(zrtt, 0.50), zp99 = percentile(zrtt, 0.99);
    std::printf("\n  %-26s %-26s %s\n", "measurement", "result", "what each side does per message");
    std::printf("  %-26s %-26s %s\n", "memcpy", fmt::format("{:.2f} GB/s", mem_gbps).c_str(),
                "one memcpy into a ring-sized buffer, one core");
    std::printf("  %-26s %-26s %s\n", "memcpy, DRAM-sized", fmt::format("{:.2f} GB/s", dram_gbps).c_str(),
                "one memcpy per message between 512 MiB buffers, one core");
    std::printf("  %-26s %-26s %s\n", "memcpy in + out",
                fmt::format("{:.2f} GB/s = {:.0f}% of memcpy", through_gb, 100 * through_gb / mem_gbps).c_str(),
                "memcpy into a ring-sized buffer and out again, one core");
    std::printf("  %-26s %-26s %s\n", "cross-core copy",
                fmt::format("{:.2f} GB/s = {:.0f}% of memcpy", cross_gb, 100 * cross_gb / mem_gbps).c_str(),
                "writer core copies in, then reader core copies out; no ring, no overlap");
    std::printf("  %-26s %-26s %s\n", "ring one-way",
                fmt::format("{:.2f} GB/s = {:.0f}% of memcpy", ring_gb, 100 * ring_gb / mem_gbps).c_str(),
                "writer: memcpy into slot; reader: memcpy out of slot");
    std::printf("  %-26s %-26s %s\n", "ring round trip p50/p99",
                fmt::format("{:.2f} / {:.2f} us", p50, p99).c_str(),
                "3 memcpys: in, slot-to-slot echo, out; both spin");
    std::printf("  %-26s %-26s %s\n", "zmq ipc one-way",
                fmt::format("{:.2f} GB/s = {:.0f}% of memcpy", zmq_gb, 100 * zmq_gb / mem_gbps).c_str(),
                "PAIR send (copies) / recv into a buffer");
    std::printf("  %-26s %-26s %s\n", "zmq ipc round trip p50/p99",
                fmt::format("{:.2f} / {:.2f} us", zp50, zp99).c_str(), "send, echo, recv");
    std::printf("\nring one-way = %.0f%% of the cross-core copy (the bytes must cross between the "
                "cores' caches; memcpy on one core never pays that)\n",
                100 * ring_gb / cross_gb);
    std::printf("ring one-way = %.0f%% of memcpy in + out on one core (the same two copies)\n",
                100 * ring_gb / through_gb);
    std::printf("ring one-way = %.0f%% of memcpy at DRAM speed (buffers larger than the caches)\n",
                100 * ring_gb / dram_gbps);
    std::printf("ring: p50 rtt %.2f us (target <= 5), throughput %.0f%% of memcpy (cache-resident; target >= 80)\n",
                p50, 100 * ring_gb / mem_gbps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench-ring: %s\n", e.what());
    return 1;
  }
}
