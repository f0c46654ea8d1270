// host.cpp: the process in which the emulator runs kernels (ordinary launches).
//
// A kernel compiled for the emulator is machine code the student wrote.  It
// never runs in the Python process that called it (which, while a notebook is
// graded, holds the tests, the cell's secret and the channel that reports
// verdicts): emulator/host.py starts this small program, which loads the
// runtime and the kernel libraries, and runs each launch on tensors copied
// into a shared memory mapping (the "arena", a memfd both processes map).
// Requests come on stdin, replies go out on a pipe; printf goes to stdout, a
// file the Python side reads after each launch.  If a kernel crashes this
// process, the Python side sees the pipe close and reports a failed launch.
//
// Protocol (little-endian, see host.py; change one, change both):
//   LOAD     u32 op=1, u32 len, path            -> i32 handle (or -1), u32 len, dlerror()
//   DESCRIBE u32 op=2, u32 handle, u32 index    -> i32 n, i32 sizes[64], i32 kinds[64]
//   ARENA    u32 op=3, u64 size                 -> i32 0 or -1
//   LAUNCH   u32 op=4, u32 handle, u32 index, u32 grid[3], u32 block[3], u64 shared_mem, f64 timeout,
//            u32 n_ranges, (u64 lo, u64 hi)[n] offsets in the arena,
//            u32 n_args, (u32 kind, u32 len, u8 bytes[16])[n]; kind 0 scalar, 1 arena offset, 2 null
//            -> Reply (below), then five strings (u32 len, bytes): fault_module, message, warnings,
//               race_module, race_variable
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "runtime.h"

namespace {

int g_reply = -1;
int g_arena_fd = -1;
unsigned char* g_arena = nullptr;
uint64_t g_arena_size = 0;
std::vector<void*> g_libs;

void read_exact(void* p, size_t n) {
  unsigned char* c = static_cast<unsigned char*>(p);
  while (n) {
    ssize_t got = read(0, c, n);
    if (got <= 0) _exit(0);  // the Python side is gone: so are we
    c += got;
    n -= (size_t)got;
  }
}

void write_exact(const void* p, size_t n) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  while (n) {
    ssize_t put = write(g_reply, c, n);
    if (put <= 0) _exit(0);
    c += put;
    n -= (size_t)put;
  }
}

template <class T> T take() {
  T v;
  read_exact(&v, sizeof v);
  return v;
}

void put_string(const char* s, size_t cap) {
  uint32_t n = (uint32_t)strnlen(s, cap);
  write_exact(&n, 4);
  write_exact(s, n);
}

struct __attribute__((packed)) Reply {
  int32_t rc, status, fault, fault_store;
  uint32_t fault_size, fault_buffer;
  int64_t fault_offset;
  uint64_t fault_pc;
  uint32_t fault_block[3], fault_thread[3];
  uint64_t counts[EMU_COUNTERS];
  uint64_t static_shared_bytes, race;
  int32_t race_store, race_other_store;
  uint32_t race_thread[3], race_other_thread[3], race_block[3];
  uint64_t race_pc, race_other_pc, race_offset;
};

void load() {
  uint32_t n = take<uint32_t>();
  std::string path(n, '\0');
  read_exact(&path[0], n);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  int32_t handle = -1;
  const char* why = "";
  if (lib) {
    handle = (int32_t)g_libs.size();
    g_libs.push_back(lib);
  } else {
    why = dlerror();
  }
  write_exact(&handle, 4);
  put_string(why ? why : "", 4096);
}

void* symbol(uint32_t handle, const char* prefix, uint32_t index) {
  if (handle >= g_libs.size()) return nullptr;
  char name[64];
  snprintf(name, sizeof name, "%s%u", prefix, index);
  return dlsym(g_libs[handle], name);
}

void describe() {
  uint32_t handle = take<uint32_t>(), index = take<uint32_t>();
  int32_t out[1 + 128] = {0};
  auto fn = reinterpret_cast<int (*)(int*, int*, int)>(symbol(handle, "emu_describe_", index));
  out[0] = fn ? fn(out + 1, out + 65, 64) : -1;
  write_exact(out, sizeof out);
}

void arena() {
  uint64_t size = take<uint64_t>();
  if (g_arena) munmap(g_arena, g_arena_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, g_arena_fd, 0);
  int32_t rc = 0;
  if (p == MAP_FAILED) {
    g_arena = nullptr;
    g_arena_size = 0;
    rc = -1;
  } else {
    g_arena = static_cast<unsigned char*>(p);
    g_arena_size = size;
  }
  write_exact(&rc, 4);
}

void launch() {
  uint32_t handle = take<uint32_t>(), index = take<uint32_t>();
  static emu_launch_config cfg;  // 17 KiB of messages: not on the stack
  memset(&cfg, 0, sizeof cfg);
  read_exact(cfg.grid, sizeof cfg.grid);
  read_exact(cfg.block, sizeof cfg.block);
  cfg.shared_mem = take<uint64_t>();
  cfg.timeout_s = take<double>();
  uint32_t n_ranges = take<uint32_t>();
  std::vector<emu_range> ranges(n_ranges + 1);
  for (uint32_t i = 0; i < n_ranges; ++i) {
    uint64_t lo = take<uint64_t>(), hi = take<uint64_t>();
    uintptr_t base = reinterpret_cast<uintptr_t>(g_arena);
    ranges[i] = emu_range{base + lo, base + hi};
  }
  cfg.buffers = ranges.data();
  cfg.n_buffers = n_ranges;
  uint32_t n_args = take<uint32_t>();
  // Each argument's bytes in 16 aligned bytes, as a GPU launch copies them.
  std::vector<uint64_t> slots(2 * (n_args + 1));
  std::vector<void*> argv(n_args + 1);
  for (uint32_t i = 0; i < n_args; ++i) {
    uint32_t kind = take<uint32_t>(), len = take<uint32_t>();
    unsigned char bytes[16];
    read_exact(bytes, 16);
    void* slot = &slots[2 * i];
    if (kind == 1) {
      uint64_t off;
      memcpy(&off, bytes, 8);
      void* p = g_arena + off;
      memcpy(slot, &p, sizeof p);
    } else if (kind == 0) {
      memcpy(slot, bytes, len > 16 ? 16 : len);
    }
    argv[i] = slot;
  }
  auto fn = reinterpret_cast<int (*)(emu_launch_config*, void**)>(symbol(handle, "emu_launch_", index));
  Reply r;
  memset(&r, 0, sizeof r);
  if (!fn) {
    snprintf(cfg.message, sizeof cfg.message, "the emulator's process has no kernel %u in that module.", index);
    r.rc = 1;
  } else {
    r.rc = fn(&cfg, argv.data());
  }
  fflush(stdout);  // the kernel's printf, for the Python side to show
  fflush(stderr);
  r.status = cfg.status;
  r.fault = cfg.fault;
  r.fault_store = cfg.fault_store;
  r.fault_size = cfg.fault_size;
  r.fault_buffer = cfg.fault_buffer;
  r.fault_offset = cfg.fault_offset;
  r.fault_pc = cfg.fault_pc;
  memcpy(r.fault_block, cfg.fault_block, sizeof r.fault_block);
  memcpy(r.fault_thread, cfg.fault_thread, sizeof r.fault_thread);
  memcpy(r.counts, cfg.counts, sizeof r.counts);
  r.static_shared_bytes = cfg.static_shared_bytes;
  r.race = cfg.race;
  r.race_store = cfg.race_store;
  r.race_other_store = cfg.race_other_store;
  memcpy(r.race_thread, cfg.race_thread, sizeof r.race_thread);
  memcpy(r.race_other_thread, cfg.race_other_thread, sizeof r.race_other_thread);
  memcpy(r.race_block, cfg.race_block, sizeof r.race_block);
  r.race_pc = cfg.race_pc;
  r.race_other_pc = cfg.race_other_pc;
  r.race_offset = cfg.race_offset;
  write_exact(&r, sizeof r);
  put_string(cfg.fault_module, sizeof cfg.fault_module);
  put_string(cfg.message, sizeof cfg.message);
  put_string(cfg.warnings, sizeof cfg.warnings);
  put_string(cfg.race_module, sizeof cfg.race_module);
  put_string(cfg.race_variable, sizeof cfg.race_variable);
}

}  // namespace

// argv: runtime library, reply fd, arena fd, the parent's pid
int main(int argc, char** argv) {
  if (argc != 5) return 2;
  // Dies with the thread that started it (in the grader: the cell's thread), and with its process.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if ((long)getppid() != atol(argv[4])) return 3;
  signal(SIGPIPE, SIG_DFL);
  g_reply = atoi(argv[2]);
  g_arena_fd = atoi(argv[3]);
  if (!dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL)) {  // the kernel libraries find their runtime here
    fprintf(stderr, "the emulator's runtime does not load: %s\n", dlerror());
    return 4;
  }
  int32_t ready = 0x454d5531;  // "EMU1"
  write_exact(&ready, 4);
  for (;;) {
    uint32_t op = take<uint32_t>();
    if (op == 1) load();
    else if (op == 2) describe();
    else if (op == 3) arena();
    else if (op == 4) launch();
    else return 5;
  }
}
