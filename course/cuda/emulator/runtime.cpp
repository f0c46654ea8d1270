// runtime.cpp: the machinery behind cuda_emu.h.
//
// One launch at a time.  A launch runs its blocks one after another.
//
// In an ordinary launch a block's CUDA threads are fibers (user-level threads,
// see "fibers" below) on one OS thread of a pool that lives as long as the process: a
// fiber runs until it waits (a barrier, a warp function), returns, or has made
// kSlice memory accesses, and before each store to global memory it lets the
// others run first, so that two threads' read-modify-write of the same element
// interleave and a lost update shows in the results (on a GPU it may or may
// not).  A switch costs well under a microsecond; waking an OS thread per CUDA
// thread cost tens (most of a small launch's time).  The sanitizer harnesses
// (-DEMU_SANITIZE) keep one OS thread per CUDA thread: AddressSanitizer and
// ThreadSanitizer watch OS threads, and worker i always runs the thread of
// linear index i, which is what lets a report name a CUDA thread from an OS
// thread's name.
//
//   __syncthreads()   a barrier over the block's threads that have not
//                     returned; a barrier some threads skip by returning is
//                     reported as a warning (undefined on a GPU).
//   warp functions    a rendezvous of the lanes named in the mask, inside the
//                     lane's warp; each participant hands in a 64-bit value
//                     and gets everybody's back (cuda_emu.h does the rest).
//   deadlocks         found when every live thread of the block waits and
//                     nothing has moved for a few ticks; the launch then fails
//                     with where each thread waits.
//   shared races      every ordinary launch also watches shared memory: two
//                     threads of a block touching the same bytes, one of them
//                     writing, with no __syncthreads() between them (nor a
//                     warp-wide sync, for two lanes of one warp) is reported
//                     as a data race.  It follows the barriers, not the timing,
//                     so it is found however the threads happen to run.
//   memory counters   the kernel is compiled with GCC's thread-sanitizer
//                     instrumentation (and linked without its library), which
//                     calls the __tsan_readN/__tsan_writeN functions below for
//                     every load and store; they are classified by address into
//                     the launch's tensors (global memory) and the block's
//                     shared memory, and anything else (locals, builtins) is
//                     not counted.
//
// Compiled with -DEMU_SANITIZE into the AddressSanitizer and ThreadSanitizer
// harnesses (harness.cpp), where the real sanitizer owns the __asan_ names and
// there is nothing to count.
// The C++ library comes first: cuda_emu.h defines keywords such as
// __noinline__ that libstdc++ spells inside its own attributes.
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdlib>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emu.h"
#include "runtime.h"

extern "C" {
__thread uint3 emu_thread_idx;
uint3 emu_block_idx;
dim3 emu_block_dim;
dim3 emu_grid_dim;
alignas(64) unsigned char emu_dynamic_shared[EMU_MAX_DYNAMIC_SHARED];
}

#ifndef EMU_SANITIZE
#define EMU_FIBERS 1
#endif

namespace {

using Clock = std::chrono::steady_clock;

// Thrown inside a CUDA thread that waits when the launch is given up
// (deadlock, timeout, interrupt); caught where the worker called the kernel.
struct Abort {};

enum WaitKind { NOT_WAITING = 0, AT_SYNCTHREADS = 1, AT_WARP = 2 };

struct Rendezvous {
  unsigned mask = 0, present = 0, readers = 0;
  int waiting = 0;
  bool done = false;
  unsigned long long vals[32] = {};
};

struct Warp {
  std::mutex m;
  std::condition_variable cv;
  unsigned live = 0;  // lanes that exist and have not returned
  std::list<Rendezvous> open;
};

struct ThreadWait {
  std::atomic<int> kind{NOT_WAITING};
  std::atomic<int> line{0};
  std::atomic<const char*> what{nullptr};
  std::atomic<unsigned> mask{0};
};

struct Warning {
  std::string key, text;
  unsigned long long count;
};

struct Launch {
  emu_launch_config* cfg = nullptr;
  emu_thunk thunk = nullptr;
  void** args = nullptr;
  const void* module = nullptr;
  int threads = 0;  // per block
  bool counting = false;
  unsigned block_serial = 0;  // the current block's, for the race check

  // The current block.  `m` guards the barrier; each warp has its own lock,
  // so that a warp exchange orders memory only inside its warp, as on a GPU.
  std::mutex m;
  std::condition_variable cv;
  int live = 0, arrived = 0;
  unsigned long long generation = 0;
  int barrier_line = 0, other_barrier_line = 0;
  int red_count = 0, red_and = 1, red_or = 0;
  int result_count = 0, result_and = 1, result_or = 0;
  std::unique_ptr<Warp[]> warps;
  std::unique_ptr<ThreadWait[]> waits;

  std::atomic<int> live_now{0};
  std::atomic<int> blocked{0};
  std::atomic<unsigned long long> progress{0};
  std::atomic<bool> abort{false};

  std::mutex done_m;
  std::condition_variable done_cv;
  int done = 0;

  std::atomic<unsigned long long> totals[EMU_COUNTERS] = {};
  std::atomic<unsigned long long> dynamic_overflow{0};

  std::mutex warn_m;
  std::vector<Warning> warnings;
  std::string error;
};

struct Counters {
  unsigned long long c[EMU_COUNTERS];
};

enum WorkerState { WORKER_IDLE = 0, WORKER_RUNNING = 1, WORKER_PARKED = 2 };

struct Worker {
  int index = 0;
  std::atomic<int> state{WORKER_IDLE};
  pthread_t thread{};
  std::mutex m;
  std::condition_variable cv;
  unsigned long long job = 0;
  Launch* launch = nullptr;
  bool retire = false;
};

std::mutex g_launch_mutex;  // one launch at a time in this process
std::vector<Worker*> g_pool;
std::atomic<bool> g_abort_requested{false};

// A process forked after launches (the grader forks each kernel from a warm
// process that ran the chapter once) inherits the pool's bookkeeping but none
// of its threads.  The child starts with an empty pool; the parent's workers
// are forgotten there, not freed: their locks may be held by threads that do
// not exist in the child.
void forget_pool_in_child() {
  new (&g_pool) std::vector<Worker*>();
  new (&g_launch_mutex) std::mutex();
}
struct ForgetPoolAtFork {
  ForgetPoolAtFork() { pthread_atfork(nullptr, nullptr, forget_pool_in_child); }
} g_forget_pool_at_fork;

__thread Launch* t_launch = nullptr;
__thread Worker* t_worker = nullptr;
__thread int t_tid = 0;
__thread int t_lane = 0;
__thread Warp* t_warp = nullptr;
__thread Counters* t_counters = nullptr;
__thread uintptr_t t_stack_lo = 0, t_stack_hi = 0;
// Where this thread is in its block: the block's serial number (all launches
// of the process counted), the __syncthreads() it has passed, and the
// warp-wide syncs (shuffles, votes, __syncwarp) it has taken part in.
__thread unsigned t_block = 0, t_epoch = 0, t_wsync = 0;
std::atomic<unsigned> g_block_serial{0};

#ifdef EMU_FIBERS
// ---------------------------------------------------------------- fibers
//
// Everything above that is per CUDA thread lives in the OS thread's TLS, as
// the kernel's code reads it (threadIdx is emu_thread_idx): a switch saves it
// into the fiber that leaves and loads that of the fiber that comes in.
//
// The switch itself: on x86-64 six callee-saved registers and the stack
// pointer (what a function call may not change; the rest the compiler saves
// around the call), a few nanoseconds; elsewhere ucontext, whose swapcontext
// also sets the signal mask, a system call each time (-DEMU_FIBERS_UCONTEXT
// takes that path on x86-64 too: how it was tested, with test_cuda_emulator).
constexpr size_t kFiberStack = 512 * 1024;  // a GPU thread's local memory is at most 512 KiB
constexpr int kSlice = 4096;                // memory accesses between two turns of a fiber

enum FiberState { FIBER_READY, FIBER_DONE, FIBER_PARKED };

struct Fiber {
#if defined(__x86_64__) && !defined(EMU_FIBERS_UCONTEXT)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  char* stack = nullptr;  // kFiberStack bytes above a guard page
  int state = FIBER_READY;
  bool yielded_waiting = false;  // its last turn only found a wait still unmet
  uint3 thread_idx{};
  int tid = 0, lane = 0;
  Warp* warp = nullptr;
  Counters* counters = nullptr;
  unsigned block = 0, epoch = 0, wsync = 0;
  int budget = kSlice;
};

// The runner's side of the switch: where it resumes when a fiber's turn ends.
struct Scheduler {
#if defined(__x86_64__) && !defined(EMU_FIBERS_UCONTEXT)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};

std::vector<Fiber*> g_fibers;
__thread Scheduler* t_scheduler = nullptr;
__thread Fiber* t_fiber = nullptr;
__thread int t_budget = kSlice;

void fiber_main(Fiber* f);

#if defined(__x86_64__) && !defined(EMU_FIBERS_UCONTEXT)
// emu_fiber_switch(save, to): push the callee-saved registers, store the stack
// pointer in *save, take `to` as the stack pointer, pop, return there.
// emu_fiber_start: where a new fiber's first switch returns; calls r13(r12).
extern "C" void emu_fiber_switch(void** save, void* to);
extern "C" void emu_fiber_start();
asm(R"(
  .text
  .p2align 4
  .globl emu_fiber_switch
  .hidden emu_fiber_switch
  .type emu_fiber_switch, @function
emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_fiber_switch, .-emu_fiber_switch
  .p2align 4
  .globl emu_fiber_start
  .hidden emu_fiber_start
  .type emu_fiber_start, @function
emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size emu_fiber_start, .-emu_fiber_start
)");

void fiber_prepare(Fiber* f) {
  // The frame emu_fiber_switch pops: r15 r14 r13 r12 rbx rbp, then the return
  // address; after it, the stack is 16-byte aligned as a call expects.
  uintptr_t top = (reinterpret_cast<uintptr_t>(f->stack) + kFiberStack) & ~uintptr_t(15);
  void** frame = reinterpret_cast<void**>(top - 72);
  frame[0] = frame[1] = nullptr;                           // r15, r14
  frame[2] = reinterpret_cast<void*>(&fiber_main);         // r13: what emu_fiber_start calls
  frame[3] = f;                                            // r12: its argument
  frame[4] = frame[5] = nullptr;                           // rbx, rbp
  frame[6] = reinterpret_cast<void*>(&emu_fiber_start);    // where the switch returns
  f->sp = frame;
}
inline void switch_to_fiber(Scheduler* s, Fiber* f) { emu_fiber_switch(&s->sp, f->sp); }
inline void switch_to_scheduler(Fiber* f, Scheduler* s) { emu_fiber_switch(&f->sp, s->sp); }
#else
void fiber_trampoline(unsigned hi, unsigned lo) {
  fiber_main(reinterpret_cast<Fiber*>((uintptr_t(hi) << 32) | lo));
}
void fiber_prepare(Fiber* f) {
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = kFiberStack;
  f->ctx.uc_link = nullptr;
  uintptr_t p = reinterpret_cast<uintptr_t>(f);
  makecontext(&f->ctx, reinterpret_cast<void (*)()>(fiber_trampoline), 2, unsigned(p >> 32), unsigned(p));
}
inline void switch_to_fiber(Scheduler* s, Fiber* f) { swapcontext(&s->ctx, &f->ctx); }
inline void switch_to_scheduler(Fiber* f, Scheduler* s) { swapcontext(&f->ctx, &s->ctx); }
#endif

bool grow_fibers(int n) {
  while ((int)g_fibers.size() < n) {
    long page = sysconf(_SC_PAGESIZE);
    void* p = mmap(nullptr, kFiberStack + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) return false;
    mprotect(p, page, PROT_NONE);  // an overflowing stack faults here, not in the next fiber's stack
    Fiber* f = new Fiber;
    f->stack = static_cast<char*>(p) + page;
    g_fibers.push_back(f);
  }
  return true;
}

// Back to the runner: this fiber's turn ends (`waiting`: it came back to a wait it found unmet
// in its last turn as well, and did nothing else; the runner calls a round of only those a deadlock).
void fiber_yield(bool waiting) {
  Fiber* f = t_fiber;
  f->yielded_waiting = waiting;
  // What a turn can change (tid, lane, warp and block stay as run_block set them).
  f->thread_idx = emu_thread_idx;
  f->counters = t_counters;
  f->epoch = t_epoch;
  f->wsync = t_wsync;
  f->budget = t_budget;
  switch_to_scheduler(f, t_scheduler);
}

void fiber_resume(Fiber* f, Scheduler* scheduler) {
  emu_thread_idx = f->thread_idx;
  t_tid = f->tid;
  t_lane = f->lane;
  t_warp = f->warp;
  t_counters = f->counters;
  t_block = f->block;
  t_epoch = f->epoch;
  t_wsync = f->wsync;
  t_budget = f->budget;
  t_stack_lo = reinterpret_cast<uintptr_t>(f->stack);
  t_stack_hi = t_stack_lo + kFiberStack;
  t_scheduler = scheduler;
  t_fiber = f;
  f->yielded_waiting = false;
  switch_to_fiber(scheduler, f);
  t_fiber = nullptr;
}
#endif

// The race check's memory of one 4-byte word of shared memory: the last write
// and the reads since, in the current block.
struct ShadowWord {
  unsigned block = 0;                // block serial these records belong to; another value: none yet
  unsigned w_epoch = 0, w_sync = 0, r_epoch = 0, r_sync = 0;
  unsigned short w_tid = 0, r_tid = 0;
  unsigned char w_mask = 0, r_mask = 0;  // the bytes of the word accessed; 0: no record
  bool r_many = false, r_one_warp = true;
  const void* w_pc = nullptr;
  const void* r_pc = nullptr;
};
constexpr int kRaceLocks = 64;
std::mutex g_race_locks[kRaceLocks];
ShadowWord* g_dynamic_shadow = nullptr;   // for emu_dynamic_shared, made on first use

// Shared variables, registered as their declarations are first reached.
struct SharedRange {
  const void* module;
  uintptr_t lo, hi;
  const char* name;
  ShadowWord* shadow;
};
constexpr int kMaxShared = 4096;
SharedRange g_shared[kMaxShared];
std::atomic<int> g_n_shared{0};
std::mutex g_shared_m;

// Uninitialised shared memory on a GPU holds whatever the last block left.
// Here it holds all one bits (NaN, -1) at the start of every block, so that a
// kernel which reads shared memory it never wrote gets visibly wrong results.
constexpr unsigned char kPoison = 0xff;

// One warning per kind and source line, however many threads run into it:
// the first thread's words, and how often it happened.
void warn(Launch& L, const std::string& key, const std::string& text) {
  std::lock_guard<std::mutex> lk(L.warn_m);
  for (Warning& w : L.warnings)
    if (w.key == key) {
      w.count++;
      return;
    }
  if (L.warnings.size() < 20) L.warnings.push_back(Warning{key, text, 1});
}

std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string thread_name(int tid) {
  const dim3& b = emu_block_dim;
  unsigned x = tid % b.x, y = (tid / b.x) % b.y, z = tid / (b.x * b.y);
  return format("(%u,%u,%u)", x, y, z);
}

std::string block_name() {
  return format("(%u,%u,%u)", emu_block_idx.x, emu_block_idx.y, emu_block_idx.z);
}

// ---------------------------------------------------------------- barriers

void complete_barrier(Launch& L, int waiters) {
  if (L.live < L.threads)
    warn(L, format("partial barrier %d", L.barrier_line),
         format("__syncthreads() on line %d was passed by %d of the %d threads of block %s: the others had "
                "returned. On a GPU a barrier that not every thread reaches is undefined behaviour (it may hang).",
                L.barrier_line, L.arrived, L.threads, block_name().c_str()));
  if (L.other_barrier_line)
    warn(L, format("mixed barriers %d %d", L.barrier_line, L.other_barrier_line),
         format("threads of block %s met at different __syncthreads() calls (lines %d and %d) in one barrier. "
                "On a GPU every thread of a block must reach the same __syncthreads().",
                block_name().c_str(), L.barrier_line, L.other_barrier_line));
  L.result_count = L.red_count;
  L.result_and = L.red_and;
  L.result_or = L.red_or;
  L.arrived = 0;
  L.other_barrier_line = 0;
  L.generation++;
  L.blocked -= waiters;
  L.progress++;
  L.cv.notify_all();
}

int barrier(int line, int op, int predicate) {
  Launch& L = *t_launch;
  std::unique_lock<std::mutex> lk(L.m);
  if (L.abort) throw Abort();
  if (L.arrived == 0) {
    L.barrier_line = line;
    L.red_count = 0;
    L.red_and = 1;
    L.red_or = 0;
  } else if (line != L.barrier_line) {
    L.other_barrier_line = line;
  }
  L.red_count += predicate != 0;
  L.red_and = L.red_and && predicate != 0;
  L.red_or = L.red_or || predicate != 0;
  L.arrived++;
  unsigned long long my_generation = L.generation;
  if (L.arrived == L.live) {
    complete_barrier(L, L.arrived - 1);
  } else {
    ThreadWait& w = L.waits[t_tid];
    w.line = line;
    w.what = "__syncthreads()";
    w.kind = AT_SYNCTHREADS;
    L.blocked++;
#ifdef EMU_FIBERS
    for (bool again = false; L.generation == my_generation && !L.abort; again = true) {
      lk.unlock();  // the others run until the last one arrives
      fiber_yield(again);
      lk.lock();
    }
#else
    L.cv.wait(lk, [&] { return L.generation != my_generation || L.abort; });
#endif
    w.kind = NOT_WAITING;
    if (L.generation == my_generation) throw Abort();
  }
  t_epoch++;
  return op == 0 ? L.result_count : op == 1 ? L.result_and : L.result_or;
}

// ---------------------------------------------------------------- warps

bool try_complete(Launch& L, Warp& w, Rendezvous& r) {
  if ((r.mask & w.live) & ~r.present) return false;
  r.done = true;
  L.blocked -= r.waiting;
  r.waiting = 0;
  L.progress++;
  w.cv.notify_all();
  return true;
}

void thread_returned(Launch& L, int tid) {
  {
    std::lock_guard<std::mutex> lk(L.m);
    L.live--;
    L.live_now = L.live;
    if (L.arrived > 0 && L.arrived == L.live) complete_barrier(L, L.arrived);
    L.progress++;
  }
  Warp& w = L.warps[tid / 32];
  std::lock_guard<std::mutex> lk(w.m);
  w.live &= ~(1u << (tid % 32));
  for (Rendezvous& r : w.open)
    if (!r.done) try_complete(L, w, r);
}

// ---------------------------------------------------------------- memory

// 1: global memory (a tensor), 2: shared memory (*shared: which variable, -1
// for dynamic shared memory), 0: anything else.
int classify(Launch& L, uintptr_t a, int* shared = nullptr) {
  uintptr_t dyn = reinterpret_cast<uintptr_t>(emu_dynamic_shared);
  if (a - dyn < EMU_MAX_DYNAMIC_SHARED) {
    if (a - dyn >= L.cfg->shared_mem) L.dynamic_overflow++;
    if (shared) *shared = -1;
    return 2;
  }
  int n = g_n_shared.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (a >= g_shared[i].lo && a < g_shared[i].hi) {
      if (shared) *shared = i;
      return 2;
    }
  for (unsigned i = 0; i < L.cfg->n_buffers; ++i)
    if (a >= L.cfg->buffers[i].lo && a < L.cfg->buffers[i].hi) return 1;
  return 0;
}

[[noreturn]] void park();
void give_up(Launch& L, const std::string& why);
std::string describe_waits(Launch& L);

// How far outside a tensor an access still counts as "just past it".  An
// off-by-one or a missing bound lands here; nothing the kernel may touch
// (its stack, the builtins, a loaded library) does, and those are excluded
// explicitly anyway.
constexpr uintptr_t kNearTensor = 4096;

bool near_a_tensor(Launch& L, uintptr_t a, unsigned* which) {
  for (unsigned i = 0; i < L.cfg->n_buffers; ++i) {
    const emu_range& r = L.cfg->buffers[i];
    if ((a >= r.hi && a - r.hi < kNearTensor) || (a < r.lo && r.lo - a <= kNearTensor)) {
      *which = i;
      return true;
    }
  }
  return false;
}

bool belongs_elsewhere(uintptr_t a) {
  if (a >= t_stack_lo && a < t_stack_hi) return true;
  uintptr_t tls = reinterpret_cast<uintptr_t>(&emu_thread_idx);
  if (a + 256 >= tls && a < tls + 256) return true;
  Dl_info info;
  return dladdr(reinterpret_cast<void*>(a), &info) != 0 && info.dli_fname != nullptr;
}

// An ordinary launch runs in the student's Python process, where writing past
// a tensor would corrupt Python's own memory and crash it later, far from the
// bug.  The memory counter sees every access before it happens, so an access
// right next to a tensor is stopped here: the launch is given up and the
// thread parks before the access is made.
[[noreturn]] void out_of_bounds(Launch& L, uintptr_t a, unsigned long long bytes, int store, unsigned which,
                                void* pc) {
  {
    std::lock_guard<std::mutex> lk(L.warn_m);
    emu_launch_config* cfg = L.cfg;
    if (!cfg->fault) {
      cfg->fault = 1;
      cfg->fault_store = store;
      cfg->fault_size = (unsigned)bytes;
      cfg->fault_buffer = which;
      cfg->fault_offset = (long long)(a - cfg->buffers[which].lo);
      Dl_info info;
      if (dladdr(pc, &info) && info.dli_fname) {
        cfg->fault_pc = reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase);
        snprintf(cfg->fault_module, sizeof cfg->fault_module, "%s", info.dli_fname);
      }
      cfg->fault_block[0] = emu_block_idx.x;
      cfg->fault_block[1] = emu_block_idx.y;
      cfg->fault_block[2] = emu_block_idx.z;
      cfg->fault_thread[0] = emu_thread_idx.x;
      cfg->fault_thread[1] = emu_thread_idx.y;
      cfg->fault_thread[2] = emu_thread_idx.z;
    }
  }
  give_up(L, "out-of-bounds access");
  park();
}

// ---------------------------------------------------------------- shared races

void thread_coords(int tid, unsigned out[3]) {
  const dim3& b = emu_block_dim;
  out[0] = tid % b.x;
  out[1] = (tid / b.x) % b.y;
  out[2] = tid / (b.x * b.y);
}

void report_race(Launch& L, uintptr_t a, int shared, int store, const void* pc, int other_tid, int other_store,
                 const void* other_pc) {
  std::lock_guard<std::mutex> lk(L.warn_m);
  emu_launch_config* cfg = L.cfg;
  if (cfg->race++) return;
  cfg->race_store = store;
  cfg->race_other_store = other_store;
  thread_coords(t_tid, cfg->race_thread);
  thread_coords(other_tid, cfg->race_other_thread);
  cfg->race_block[0] = emu_block_idx.x;
  cfg->race_block[1] = emu_block_idx.y;
  cfg->race_block[2] = emu_block_idx.z;
  Dl_info info;
  if (dladdr(pc, &info) && info.dli_fname) {
    cfg->race_pc = reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase);
    snprintf(cfg->race_module, sizeof cfg->race_module, "%s", info.dli_fname);
    cfg->race_other_pc = other_pc ? reinterpret_cast<uintptr_t>(other_pc) - reinterpret_cast<uintptr_t>(info.dli_fbase)
                                  : 0;
  }
  if (shared >= 0) {
    snprintf(cfg->race_variable, sizeof cfg->race_variable, "%s", g_shared[shared].name ? g_shared[shared].name : "");
    cfg->race_offset = a - g_shared[shared].lo;
  } else {
    cfg->race_variable[0] = 0;
    cfg->race_offset = a - reinterpret_cast<uintptr_t>(emu_dynamic_shared);
  }
}

// Another thread's access, made when it had passed `epoch` barriers and
// `sync` warp-wide syncs, and this thread's access now: is there nothing
// between them that orders them?
inline bool unordered(unsigned epoch, unsigned sync, int tid) {
  if (tid == t_tid) return false;
  if (epoch != t_epoch) return false;                           // a __syncthreads() between them
  if (tid / 32 == t_tid / 32 && t_wsync > sync) return false;  // a warp-wide sync between them
  return true;
}

void check_race(Launch& L, uintptr_t a, unsigned long long bytes, int store, const void* pc, int shared) {
  ShadowWord* shadow;
  uintptr_t base;
  if (shared >= 0) {
    shadow = g_shared[shared].shadow;
    base = g_shared[shared].lo;
  } else {
    shadow = g_dynamic_shadow;
    base = reinterpret_cast<uintptr_t>(emu_dynamic_shared);
  }
  if (!shadow || bytes == 0) return;
  uintptr_t end = a + bytes;
  for (uintptr_t w = (a - base) / 4; base + 4 * w < end; ++w) {
    uintptr_t lo = std::max<uintptr_t>(a, base + 4 * w), hi = std::min<uintptr_t>(end, base + 4 * w + 4);
    unsigned char mask = (unsigned char)(((1u << (hi - lo)) - 1u) << (lo - base - 4 * w));
    std::lock_guard<std::mutex> lk(g_race_locks[(base / 4 + w) % kRaceLocks]);
    ShadowWord& r = shadow[w];
    if (r.block != t_block) r = ShadowWord{t_block};
    if ((r.w_mask & mask) && unordered(r.w_epoch, r.w_sync, r.w_tid))
      report_race(L, lo, shared, store, pc, r.w_tid, 1, r.w_pc);
    if (store) {
      if ((r.r_mask & mask) && r.r_epoch == t_epoch) {
        bool ordered_all = r.r_many ? (r.r_one_warp && r.r_tid / 32 == t_tid / 32 && t_wsync > r.r_sync)
                                    : !unordered(r.r_epoch, r.r_sync, r.r_tid);
        if (!ordered_all) report_race(L, lo, shared, store, pc, r.r_tid, 0, r.r_pc);
      }
      r.w_epoch = t_epoch;
      r.w_sync = t_wsync;
      r.w_tid = (unsigned short)t_tid;
      r.w_mask = mask;
      r.w_pc = pc;
      r.r_mask = 0;
    } else if (!r.r_mask || r.r_epoch != t_epoch) {
      r.r_epoch = t_epoch;
      r.r_sync = t_wsync;
      r.r_tid = (unsigned short)t_tid;
      r.r_mask = mask;
      r.r_many = false;
      r.r_one_warp = true;
      r.r_pc = pc;
    } else {
      if (r.r_tid != t_tid) {
        r.r_many = true;
        if (r.r_tid / 32 != t_tid / 32) r.r_one_warp = false;
      }
      r.r_sync = std::max(r.r_sync, t_wsync);
      r.r_mask |= mask;
      if (!r.r_many) r.r_pc = pc;
    }
  }
}

inline void count_access(uintptr_t a, unsigned long long bytes, int store, void* pc) {
  Counters* c = t_counters;
  if (!c) return;
  Launch& L = *t_launch;
  if (L.abort.load(std::memory_order_relaxed)) park();
  int shared = -1;
  int space = classify(L, a, &shared);
  if (space == 1) {
    c->c[EMU_GLOBAL_LOADS + store]++;
    c->c[EMU_GLOBAL_LOAD_BYTES + store] += bytes;
  } else if (space == 2) {
    c->c[EMU_SHARED_LOADS + store]++;
    c->c[EMU_SHARED_LOAD_BYTES + store] += bytes;
    check_race(L, a, bytes, store, pc, shared);
  } else {
    unsigned which;
    if (near_a_tensor(L, a, &which) && !belongs_elsewhere(a)) out_of_bounds(L, a, bytes, store, which, pc);
  }
#ifdef EMU_FIBERS
  // The others' turn before a global store (a racy read-modify-write loses updates, visibly), and
  // every kSlice accesses (a thread that spins on memory another thread will write lets it run).
  if ((space == 1 && store) || --t_budget <= 0) {
    t_budget = kSlice;
    fiber_yield(false);
  }
#endif
}

void count_atomic(void* p) {
  Counters* c = t_counters;
  if (!c) return;
  int space = classify(*t_launch, reinterpret_cast<uintptr_t>(p));
  if (space == 1) c->c[EMU_GLOBAL_ATOMICS]++;
  if (space == 2) c->c[EMU_SHARED_ATOMICS]++;
}

void poison_shared(Launch& L) {
  int n = g_n_shared.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) memset(reinterpret_cast<void*>(g_shared[i].lo), kPoison, g_shared[i].hi - g_shared[i].lo);
  memset(emu_dynamic_shared, kPoison, L.cfg->shared_mem);
}

// ---------------------------------------------------------------- threads

// The state of a block before its first thread starts.
void begin_block(Launch& L, uint3 index) {
  emu_block_idx = index;
  L.block_serial = ++g_block_serial;
  L.live = L.threads;
  L.live_now = L.threads;
  L.arrived = 0;
  L.blocked = 0;
  for (int i = 0; i < (L.threads + 31) / 32; ++i) {
    int lanes = std::min(32, L.threads - 32 * i);
    L.warps[i].live = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
    L.warps[i].open.clear();
  }
  if (L.counting) poison_shared(L);
}

// One CUDA thread, start to end, on whatever stack it was given.
void run_cuda_thread(Launch& L, int tid) {
  t_launch = &L;
  t_tid = tid;
  t_lane = tid % 32;
  t_warp = &L.warps[tid / 32];
  const dim3& b = emu_block_dim;
  emu_thread_idx = uint3{tid % b.x, (tid / b.x) % b.y, tid / (b.x * b.y)};
  t_block = L.block_serial;
  t_epoch = 0;
  t_wsync = 0;
  Counters counters = {};
  t_counters = L.counting ? &counters : nullptr;
  try {
    L.thunk(L.args);
  } catch (const Abort&) {
  } catch (...) {
    std::lock_guard<std::mutex> lk(L.warn_m);
    if (L.error.empty()) L.error = "your kernel threw a C++ exception (thread " + thread_name(tid) + ").";
  }
  t_counters = nullptr;
  for (int i = 0; i < EMU_COUNTERS; ++i)
    if (counters.c[i]) L.totals[i] += counters.c[i];
  thread_returned(L, tid);
}

void block_done(Launch& L, int threads) {
  std::lock_guard<std::mutex> lk(L.done_m);
  L.done += threads;
  if (L.done >= L.threads) L.done_cv.notify_all();
}

#ifdef EMU_FIBERS
void fiber_main(Fiber* f) {
  run_cuda_thread(*t_launch, f->tid);
  f->state = FIBER_DONE;
  switch_to_scheduler(f, t_scheduler);  // never resumed: the next block prepares it anew
  abort();
}

// The block's threads as fibers, taken in turn until each has returned, the
// launch is given up, or a whole round of turns changes nothing (every live
// thread waits on something no other can bring: a deadlock).
void run_block(Worker* me, Launch& L) {
  Scheduler scheduler;
  Launch* launch = &L;
  for (int tid = 0; tid < L.threads; ++tid) {
    Fiber* f = g_fibers[tid];
    fiber_prepare(f);
    f->state = FIBER_READY;
    f->thread_idx = uint3{};
    f->tid = tid;
    f->lane = tid % 32;
    f->warp = &L.warps[tid / 32];
    f->counters = nullptr;
    f->block = L.block_serial;
    f->epoch = f->wsync = 0;
    f->budget = kSlice;
  }
  int left = L.threads;
  while (left > 0 && !L.abort) {
    unsigned long long progress = L.progress;
    bool moved = false;  // a turn that did more than find its wait still unmet
    for (int tid = 0; tid < L.threads && !L.abort; ++tid) {
      Fiber* f = g_fibers[tid];
      if (f->state == FIBER_DONE || f->state == FIBER_PARKED) continue;
      t_launch = launch;
      t_worker = me;
      fiber_resume(f, &scheduler);
      if (f->state == FIBER_DONE || f->state == FIBER_PARKED) {
        left--;
        moved = true;
      } else if (!f->yielded_waiting) {
        moved = true;
      }
    }
    if (left > 0 && !moved && L.progress == progress && !L.abort) give_up(L, describe_waits(L));
  }
}
#endif

bool failed(Launch& L) {
  if (L.abort) return true;
  std::lock_guard<std::mutex> lk(L.warn_m);
  return !L.error.empty();
}

void run_thread(Worker* me, Launch& L, int tid) {
#ifdef EMU_FIBERS
  (void)tid;  // the runner: every block of the grid, in order, until one fails
  const emu_launch_config& cfg = *L.cfg;
  bool stop = false;
  for (unsigned z = 0; !stop && z < cfg.grid[2]; ++z)
    for (unsigned y = 0; !stop && y < cfg.grid[1]; ++y)
      for (unsigned x = 0; !stop && x < cfg.grid[0]; ++x) {
        begin_block(L, uint3{x, y, z});
        run_block(me, L);
        stop = failed(L);
      }
  me->state = WORKER_IDLE;
  block_done(L, L.threads);
#else
  t_worker = me;
  run_cuda_thread(L, tid);
  me->state = WORKER_IDLE;
  block_done(L, 1);
#endif
}

// A thread caught in the memory counter of a launch that was given up (say,
// an endless loop) cannot be unwound from there, so it stops forever and
// its worker is replaced.  It only sleeps; it holds no lock.
[[noreturn]] void park() {
  Launch& L = *t_launch;
  t_counters = nullptr;
#ifdef EMU_FIBERS
  // A fiber is simply never taken again; its stack is made anew for the next block.
  t_fiber->state = FIBER_PARKED;
  fiber_yield(false);
  (void)L;
  abort();  // not reached: the runner never resumes a parked fiber
#else
  t_worker->state = WORKER_PARKED;
  block_done(L, 1);
  for (;;) pause();
#endif
}

void* worker_main(void* arg) {
  Worker* w = static_cast<Worker*>(arg);
  char name[16];
  snprintf(name, sizeof name, "cuda-t%d", w->index);
  pthread_setname_np(pthread_self(), name);
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* lo;
    size_t size;
    if (pthread_attr_getstack(&attr, &lo, &size) == 0) {
      t_stack_lo = reinterpret_cast<uintptr_t>(lo);
      t_stack_hi = t_stack_lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  unsigned long long seen = 0;
  for (;;) {
    Launch* L;
    {
      std::unique_lock<std::mutex> lk(w->m);
      w->cv.wait(lk, [&] { return w->job != seen || w->retire; });
      if (w->retire) return nullptr;
      seen = w->job;
      L = w->launch;
    }
    run_thread(w, *L, w->index);
    std::lock_guard<std::mutex> lk(w->m);
    if (w->retire) return nullptr;
  }
}

bool grow_pool(int n) {
  if ((int)g_pool.size() < n) g_pool.resize(n, nullptr);
  for (int i = 0; i < n; ++i) {
    if (g_pool[i]) continue;
    Worker* w = new Worker;
    w->index = i;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 4u << 20);
    int rc = pthread_create(&w->thread, &attr, worker_main, w);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      delete w;
      return false;
    }
    pthread_detach(w->thread);
    g_pool[i] = w;
  }
  return true;
}

// ---------------------------------------------------------------- deadlocks

std::string describe_waits(Launch& L) {
  struct Group {
    int kind, line;
    const char* what;
    unsigned mask;
    int first, last, count;
  };
  std::vector<Group> groups;
  int returned = 0;
  for (int t = 0; t < L.threads; ++t) {
    ThreadWait& w = L.waits[t];
    int kind = w.kind;
    if (kind == NOT_WAITING) {
      returned++;
      continue;
    }
    Group g{kind, w.line, w.what, kind == AT_WARP ? w.mask.load() : 0u, t, t, 1};
    if (!groups.empty()) {
      Group& last = groups.back();
      if (last.kind == g.kind && last.line == g.line && last.what == g.what && last.mask == g.mask) {
        last.last = t;
        last.count++;
        continue;
      }
    }
    groups.push_back(g);
  }
  std::string s = "deadlock in block " + block_name() + ": every thread that has not returned is waiting.\n";
  for (const Group& g : groups) {
    s += format("  %d thread%s %s%s%s wait at %s on line %d", g.count, g.count == 1 ? "" : "s",
                thread_name(g.first).c_str(), g.count > 1 ? " to " : "",
                g.count > 1 ? thread_name(g.last).c_str() : "", g.what ? g.what : "?", g.line);
    if (g.kind == AT_WARP) s += format(" (mask 0x%08x)", g.mask);
    s += "\n";
  }
  if (returned) s += format("  %d thread%s had returned.\n", returned, returned == 1 ? "" : "s");
  s += "On a GPU this kernel would hang. Every thread of a block must reach the same __syncthreads(), "
       "and every lane named in a warp function's mask must call it with the same mask.";
  return s;
}

void give_up(Launch& L, const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(L.warn_m);
    if (L.error.empty()) L.error = why;
  }
  L.abort = true;
  {
    std::lock_guard<std::mutex> lk(L.m);
    L.cv.notify_all();
  }
  for (int i = 0; i < (L.threads + 31) / 32; ++i) {
    std::lock_guard<std::mutex> lk(L.warps[i].m);
    L.warps[i].cv.notify_all();
  }
}

// Waits for the block's threads; false if the launch was given up.
bool wait_for_block(Launch& L, Clock::time_point start) {
  const auto tick = std::chrono::milliseconds(20);
  int still = 0;
  unsigned long long seen_progress = L.progress;
  Clock::time_point abort_seen{};
  std::unique_lock<std::mutex> lk(L.done_m);
  while (L.done < L.threads) {
    L.done_cv.wait_for(lk, tick);
    if (L.done >= L.threads) break;
    if (L.abort) {
      // Threads that were waiting unwind at once; one in an endless loop
      // stops at its next memory access.  One that never touches memory
      // again is left behind after a grace period.
      if (abort_seen == Clock::time_point{}) abort_seen = Clock::now();
      if (Clock::now() - abort_seen > std::chrono::seconds(2)) return false;
      continue;
    }
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    unsigned long long p = L.progress;
    bool stuck = L.blocked.load() >= L.live_now.load() && L.live_now.load() > 0 && p == seen_progress;
    still = stuck ? still + 1 : 0;
    seen_progress = p;
    std::string why;
    if (g_abort_requested.exchange(false)) why = "the launch was interrupted.";
    else if (L.cfg->timeout_s > 0 && elapsed > L.cfg->timeout_s)
      why = format("the kernel did not finish within %g s (an endless loop?).", L.cfg->timeout_s);
    else if (still >= 3) why = describe_waits(L);
    if (!why.empty()) {
      lk.unlock();
      give_up(L, why);
      lk.lock();
    }
  }
  return !L.abort;
}

}  // namespace

// ---------------------------------------------------------------- C API

extern "C" {

void emu_syncthreads(int line) { barrier(line, 0, 0); }
int emu_syncthreads_reduce(int predicate, int op, int line) { return barrier(line, op, predicate); }

void emu_warp_exchange(unsigned mask, unsigned long long value, const char* what, int line,
                       unsigned long long* values, unsigned* present) {
  Launch& L = *t_launch;
  Warp& w = *t_warp;
  unsigned bit = 1u << t_lane;
  if (!(mask & bit)) {
    warn(L, format("own lane %s %d", what, line),
         format("thread %s of block %s calls %s on line %d with mask 0x%08x, which leaves out its own lane %d: "
                "undefined on a GPU.",
                thread_name(t_tid).c_str(), block_name().c_str(), what, line, mask, t_lane));
    mask |= bit;
  }
  std::unique_lock<std::mutex> lk(w.m);
  if (L.abort) throw Abort();
  Rendezvous* r = nullptr;
  for (Rendezvous& o : w.open)
    if (!o.done && o.mask == mask && !(o.present & bit)) {
      r = &o;
      break;
    }
  if (!r) {
    w.open.emplace_back();
    r = &w.open.back();
    r->mask = mask;
  }
  r->vals[t_lane] = value;
  r->present |= bit;
  if (!try_complete(L, w, *r)) {
    ThreadWait& tw = L.waits[t_tid];
    tw.line = line;
    tw.what = what;
    tw.mask = mask;
    tw.kind = AT_WARP;
    r->waiting++;
    L.blocked++;
#ifdef EMU_FIBERS
    for (bool again = false; !r->done && !L.abort.load(); again = true) {
      lk.unlock();
      fiber_yield(again);
      lk.lock();
    }
#else
    w.cv.wait(lk, [&] { return r->done || L.abort.load(); });
#endif
    tw.kind = NOT_WAITING;
    if (!r->done) throw Abort();
  }
  memcpy(values, r->vals, sizeof r->vals);
  *present = r->present;
  t_wsync++;
  r->readers |= bit;
  if (r->readers == r->present)
    for (auto it = w.open.begin(); it != w.open.end(); ++it)
      if (&*it == r) {
        w.open.erase(it);
        break;
      }
}

unsigned emu_activemask(void) {
  std::lock_guard<std::mutex> lk(t_warp->m);
  return t_warp->live;
}

int emu_lane_id(void) { return t_lane; }

void emu_warn_undefined_lane(const char* what, int line, int src_lane) {
  Launch& L = *t_launch;
  warn(L, format("undefined lane %s %d", what, line),
       format("%s on line %d: thread %s of block %s reads lane %d, which did not take part (it had returned, "
              "is outside the block, or is not in the mask). On a GPU the value is undefined; here it is all "
              "one bits (NaN or -1).",
              what, line, thread_name(t_tid).c_str(), block_name().c_str(), src_lane));
}

void emu_register_shared(const void* module, void* address, unsigned long long bytes, const char* name) {
  std::lock_guard<std::mutex> lk(g_shared_m);
  int n = g_n_shared.load(std::memory_order_relaxed);
  uintptr_t lo = reinterpret_cast<uintptr_t>(address);
  for (int i = 0; i < n; ++i)
    if (g_shared[i].lo == lo) return;
  if (n == kMaxShared) return;
  memset(address, kPoison, bytes);
  g_shared[n] = SharedRange{module, lo, lo + bytes, name, new ShadowWord[bytes / 4 + 2]};
  g_n_shared.store(n + 1, std::memory_order_release);
}

void* emu_shared_alloc(unsigned long long bytes, const char* name) {
  void* p = malloc(bytes ? bytes : 1);
  memset(p, kPoison, bytes);
#ifdef EMU_SANITIZE
  // Lets the report parser name the shared array a bad address belongs to.
  fprintf(stderr, "EMU-SHARED %p %llu %s\n", p, bytes, name);
#else
  (void)name;
#endif
  return p;
}

void emu_threadfence(void) { std::atomic_thread_fence(std::memory_order_seq_cst); }

void emu_request_abort(void) { g_abort_requested = true; }

int emu_run(emu_launch_config* cfg, emu_thunk thunk, void** args, const void* module) {
  std::lock_guard<std::mutex> launch_lock(g_launch_mutex);
  cfg->status = 1;
  cfg->fault = 0;
  cfg->fault_module[0] = 0;
  cfg->race = 0;
  cfg->race_module[0] = cfg->race_variable[0] = 0;
  if (cfg->shared_mem && !g_dynamic_shadow) g_dynamic_shadow = new ShadowWord[EMU_MAX_DYNAMIC_SHARED / 4 + 1];
  cfg->message[0] = cfg->warnings[0] = 0;
  for (unsigned long long& c : cfg->counts) c = 0;
  unsigned long long threads = (unsigned long long)cfg->block[0] * cfg->block[1] * cfg->block[2];
  if (threads == 0 || threads > 1024 || cfg->grid[0] == 0 || cfg->grid[1] == 0 || cfg->grid[2] == 0) {
    snprintf(cfg->message, sizeof cfg->message, "invalid launch: grid and block sizes must be at least 1 and a block "
                                                "has at most 1024 threads.");
    return 1;
  }
  if (cfg->shared_mem > EMU_MAX_DYNAMIC_SHARED) {
    snprintf(cfg->message, sizeof cfg->message, "shared_mem=%llu bytes is more than a block can have (%d).",
             cfg->shared_mem, EMU_MAX_DYNAMIC_SHARED);
    return 1;
  }
  g_abort_requested = false;
  Launch* L = new Launch;
  L->cfg = cfg;
  L->thunk = thunk;
  L->args = args;
  L->module = module;
  L->threads = (int)threads;
#ifdef EMU_SANITIZE
  L->counting = false;
#else
  L->counting = true;
#endif
  L->warps.reset(new Warp[(L->threads + 31) / 32]);
  L->waits.reset(new ThreadWait[L->threads]);
  emu_block_dim = dim3(cfg->block[0], cfg->block[1], cfg->block[2]);
  emu_grid_dim = dim3(cfg->grid[0], cfg->grid[1], cfg->grid[2]);
#ifdef EMU_FIBERS
  const int workers = 1;  // one OS thread runs the block's fibers
  bool started = grow_pool(1) && grow_fibers(L->threads);
#else
  const int workers = L->threads;
  bool started = grow_pool(L->threads);
#endif
  if (!started) {
    snprintf(cfg->message, sizeof cfg->message, "could not start %d threads for one block.", L->threads);
    delete L;
    return 1;
  }
  Clock::time_point start = Clock::now();
  bool ok = true;
  auto hand_out = [&] {
    for (int i = 0; i < workers; ++i) {
      Worker* w = g_pool[i];
      std::lock_guard<std::mutex> lk(w->m);
      w->state = WORKER_RUNNING;
      w->launch = L;
      w->job++;
      w->cv.notify_one();
    }
  };
#ifdef EMU_FIBERS
  L->done = 0;
  hand_out();  // the runner takes the whole grid: one hand-over per launch, not one per block
  ok = wait_for_block(*L, start);
  {
    std::lock_guard<std::mutex> lk(L->warn_m);
    if (!L->error.empty()) ok = false;
  }
#else
  for (unsigned z = 0; ok && z < cfg->grid[2]; ++z)
    for (unsigned y = 0; ok && y < cfg->grid[1]; ++y)
      for (unsigned x = 0; ok && x < cfg->grid[0]; ++x) {
        begin_block(*L, uint3{x, y, z});
        L->done = 0;
        hand_out();
        ok = wait_for_block(*L, start);
        std::lock_guard<std::mutex> lk(L->warn_m);
        if (!L->error.empty()) ok = false;
      }
#endif
  fflush(stdout);

  for (int i = 0; i < EMU_COUNTERS; ++i) cfg->counts[i] = L->totals[i];
  unsigned long long static_shared = 0;
  int n = g_n_shared.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (g_shared[i].module == module) static_shared += g_shared[i].hi - g_shared[i].lo;
  cfg->static_shared_bytes = static_shared;
  if (L->dynamic_overflow)
    warn(*L, "dynamic overflow",
         format("the kernel touched dynamic shared memory (extern __shared__) beyond the shared_mem=%llu bytes "
                "the launch asked for, %llu times. On a GPU that is an out-of-bounds access; run with "
                "check=\"bounds\" to see the line.",
                cfg->shared_mem, (unsigned long long)L->dynamic_overflow));
  std::string warnings;
  for (const Warning& w : L->warnings)
    warnings += w.count > 1 ? w.text + format(" (%llu times in all)\n", w.count) : w.text + "\n";
  snprintf(cfg->warnings, sizeof cfg->warnings, "%s", warnings.c_str());
  {
    std::lock_guard<std::mutex> lk(L->warn_m);
    snprintf(cfg->message, sizeof cfg->message, "%s", L->error.c_str());
  }
  cfg->status = ok ? 0 : 1;

  // A worker that parked, or is still running (a loop that never touches
  // memory), is lost: its slot gets a fresh thread next time, and the launch's
  // state stays allocated for as long as such a thread might still look at it.
  bool leak = false;
  for (int i = 0; i < workers; ++i) {
    Worker* w = g_pool[i];
    int state = w->state;
    if (state == WORKER_IDLE) continue;
    std::lock_guard<std::mutex> lk(w->m);
    w->retire = true;
    g_pool[i] = nullptr;
    if (state == WORKER_RUNNING) leak = true;
  }
#ifdef EMU_FIBERS
  // A runner still running is on one of the fibers' stacks: the next launch gets stacks of its own.
  if (leak) new (&g_fibers) std::vector<Fiber*>();
#endif
  if (leak)
    snprintf(cfg->message + strlen(cfg->message), sizeof cfg->message - strlen(cfg->message),
             "\n(some threads could not be stopped and go on running in the background: restart the Python "
             "kernel to get rid of them.)");
  if (!leak) delete L;
  return cfg->status;
}

}  // extern "C"

// ---------------------------------------------------------------- atomics

namespace {
template <class T>
T int_atomic(int op, T* p, T v, T extra) {
  count_atomic(p);
  switch (op) {
    case EMU_ADD: return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
    case EMU_SUB: return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
    case EMU_EXCH: return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
    case EMU_AND: return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
    case EMU_OR: return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
    case EMU_XOR: return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);
    case EMU_CAS: {
      T expected = extra;
      __atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      return expected;
    }
    default: break;
  }
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  for (;;) {
    T desired;
    switch (op) {
      case EMU_MIN: desired = v < old ? v : old; break;
      case EMU_MAX: desired = v > old ? v : old; break;
      case EMU_INC: desired = old >= v ? 0 : old + 1; break;
      case EMU_DEC: desired = (old == 0 || old > v) ? v : old - 1; break;
      default: return old;
    }
    if (__atomic_compare_exchange_n(p, &old, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return old;
  }
}

template <class F, class Bits>
F float_atomic(int op, F* p, F v) {
  count_atomic(p);
  Bits* q = reinterpret_cast<Bits*>(p);
  Bits old_bits = __atomic_load_n(q, __ATOMIC_SEQ_CST);
  for (;;) {
    F old;
    memcpy(&old, &old_bits, sizeof old);
    F desired = op == EMU_ADD    ? old + v
                : op == EMU_EXCH ? v
                : op == EMU_MAX  ? (v > old ? v : old)
                                 : (v < old ? v : old);
    Bits desired_bits;
    memcpy(&desired_bits, &desired, sizeof desired);
    if (__atomic_compare_exchange_n(q, &old_bits, desired_bits, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return old;
  }
}
}  // namespace

extern "C" {
int emu_atomic_i32(int op, int* p, int v, int extra) { return int_atomic(op, p, v, extra); }
unsigned emu_atomic_u32(int op, unsigned* p, unsigned v, unsigned extra) { return int_atomic(op, p, v, extra); }
long long emu_atomic_i64(int op, long long* p, long long v, long long extra) { return int_atomic(op, p, v, extra); }
unsigned long long emu_atomic_u64(int op, unsigned long long* p, unsigned long long v, unsigned long long extra) {
  return int_atomic(op, p, v, extra);
}
float emu_atomic_f32(int op, float* p, float v) { return float_atomic<float, uint32_t>(op, p, v); }
double emu_atomic_f64(int op, double* p, double v) { return float_atomic<double, uint64_t>(op, p, v); }
}

// ---------------------------------------------------------------- counters

#ifndef EMU_SANITIZE
// GCC calls these from every load and store of a kernel compiled with
// ThreadSanitizer's instrumentation (build.py, COUNT_FLAGS), which is linked
// without ThreadSanitizer's library: here they are memory counters.
#define EMU_PC __builtin_return_address(0)
#define EMU_ACCESS(N)                                                                                  \
  extern "C" void __tsan_read##N(void* a) { count_access((uintptr_t)a, N, 0, EMU_PC); }              \
  extern "C" void __tsan_write##N(void* a) { count_access((uintptr_t)a, N, 1, EMU_PC); }             \
  extern "C" void __tsan_unaligned_read##N(void* a) { count_access((uintptr_t)a, N, 0, EMU_PC); }    \
  extern "C" void __tsan_unaligned_write##N(void* a) { count_access((uintptr_t)a, N, 1, EMU_PC); }   \
  extern "C" void __tsan_volatile_read##N(void* a) { count_access((uintptr_t)a, N, 0, EMU_PC); }     \
  extern "C" void __tsan_volatile_write##N(void* a) { count_access((uintptr_t)a, N, 1, EMU_PC); }
EMU_ACCESS(1)
EMU_ACCESS(2)
EMU_ACCESS(4)
EMU_ACCESS(8)
EMU_ACCESS(16)
#undef EMU_ACCESS
extern "C" void __tsan_read_range(void* a, unsigned long n) { count_access((uintptr_t)a, n, 0, EMU_PC); }
extern "C" void __tsan_write_range(void* a, unsigned long n) { count_access((uintptr_t)a, n, 1, EMU_PC); }
// The rest of the instrumentation's calls have nothing to do here.
extern "C" void __tsan_init(void) {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit(void) {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// Atomics the compiler itself emits (the guard of a function-local static,
// such as a shared variable's registration): done, not counted.
#define EMU_TSAN_ATOMICS(N, T)                                                                                   \
  extern "C" T __tsan_atomic##N##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
  extern "C" void __tsan_atomic##N##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
  extern "C" T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                            \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                              \
  extern "C" T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) {                                           \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                              \
  extern "C" T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) {                                           \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                              \
  extern "C" T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) {                                           \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                              \
  extern "C" T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) {                                            \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                              \
  extern "C" T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) {                                           \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                              \
  extern "C" T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) {                                          \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                              \
  extern "C" int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                      \
  }                                                                                                              \
  extern "C" int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                  \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                       \
  }                                                                                                              \
  extern "C" T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                      \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                            \
    return c;                                                                                                    \
  }
EMU_TSAN_ATOMICS(8, char)
EMU_TSAN_ATOMICS(16, short)
EMU_TSAN_ATOMICS(32, int)
EMU_TSAN_ATOMICS(64, long)
#undef EMU_TSAN_ATOMICS
extern "C" void __tsan_atomic_signal_fence(int) {}
#endif
