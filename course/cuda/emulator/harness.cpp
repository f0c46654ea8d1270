// harness.cpp: runs one launch in a process of its own, for the diagnostic
// modes.  AddressSanitizer aborts or reports from inside the process it
// guards, and ThreadSanitizer cannot watch a library loaded into a Python
// that was not built with it, so these modes compile the kernel, the runtime
// and this file into one executable and run it on copies of the tensors.
//
//   harness ARGS OUT
//
// ARGS (written by emulator/sanitize.py, all little-endian):
//   "EMUARGS1", u32 launcher, u32 grid[3], u32 block[3], u64 shared_mem,
//   f64 timeout_s, u32 n_buffers, then per buffer: u64 size, bytes;
//   u32 n_args, then per argument: u32 kind (0 scalar, 1 pointer, 2 null),
//   scalar: u32 size, bytes; pointer: u32 buffer, u64 offset.
// OUT: i32 status, u32 length + message, u32 length + warnings, then the
//   bytes of every buffer, as the kernel left them.
//
// Each buffer is malloc'ed at exactly its size, so that AddressSanitizer's
// red zones sit right where the tensor ends.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#include "cuda_emu.h"
#include "runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
// Called by AddressSanitizer just before it prints a report: say which CUDA
// thread made the bad access, which the report itself cannot know.
extern "C" void __asan_on_error() {
  fprintf(stderr, "EMU-FAULT-THREAD block (%u,%u,%u) thread (%u,%u,%u)\n", emu_block_idx.x, emu_block_idx.y,
          emu_block_idx.z, emu_thread_idx.x, emu_thread_idx.y, emu_thread_idx.z);
}
#endif

struct emu_launcher_entry {
  const char* name;
  int (*launch)(emu_launch_config*, void**);
};
extern "C" const emu_launcher_entry emu_launchers[];
extern "C" const int emu_n_launchers;

namespace {
struct Reader {
  FILE* f;
  template <class T>
  T get() {
    T v{};
    if (fread(&v, sizeof v, 1, f) != 1) fail("truncated argument file");
    return v;
  }
  void bytes(void* dst, size_t n) {
    if (n && fread(dst, 1, n, f) != n) fail("truncated argument file");
  }
  [[noreturn]] static void fail(const char* why) {
    fprintf(stderr, "EMU-HARNESS-ERROR %s\n", why);
    exit(3);
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) Reader::fail("usage: harness ARGS OUT");
  Reader in{fopen(argv[1], "rb")};
  if (!in.f) Reader::fail("cannot open the argument file");
  char magic[8];
  in.bytes(magic, 8);
  if (memcmp(magic, "EMUARGS1", 8) != 0) Reader::fail("not an argument file");
  unsigned launcher = in.get<unsigned>();
  if ((int)launcher >= emu_n_launchers) Reader::fail("no such kernel");
  emu_launch_config* cfg = new emu_launch_config();
  for (int i = 0; i < 3; ++i) cfg->grid[i] = in.get<unsigned>();
  for (int i = 0; i < 3; ++i) cfg->block[i] = in.get<unsigned>();
  cfg->shared_mem = in.get<unsigned long long>();
  cfg->timeout_s = in.get<double>();

  unsigned n_buffers = in.get<unsigned>();
  std::vector<unsigned char*> buffers(n_buffers);
  std::vector<unsigned long long> sizes(n_buffers);
  std::vector<emu_range> ranges(n_buffers);
  for (unsigned i = 0; i < n_buffers; ++i) {
    sizes[i] = in.get<unsigned long long>();
    buffers[i] = static_cast<unsigned char*>(malloc(sizes[i]));
    in.bytes(buffers[i], sizes[i]);
    ranges[i] = emu_range{(unsigned long long)buffers[i], (unsigned long long)buffers[i] + sizes[i]};
    // Lets the report parser tell which tensor a bad address belongs to.
    fprintf(stderr, "EMU-BUFFER %u %p %llu\n", i, (void*)buffers[i], sizes[i]);
  }
  cfg->buffers = ranges.data();
  cfg->n_buffers = n_buffers;

  unsigned n_args = in.get<unsigned>();
  // 16 aligned bytes per argument: enough for any scalar or pointer.
  struct alignas(16) Slot {
    unsigned char bytes[16];
  };
  std::vector<Slot> slots(n_args);
  std::vector<void*> args(n_args);
  for (unsigned i = 0; i < n_args; ++i) {
    unsigned kind = in.get<unsigned>();
    memset(slots[i].bytes, 0, sizeof slots[i].bytes);
    if (kind == 0) {
      unsigned size = in.get<unsigned>();
      if (size > sizeof slots[i].bytes) Reader::fail("scalar argument too large");
      in.bytes(slots[i].bytes, size);
    } else if (kind == 1) {
      unsigned b = in.get<unsigned>();
      unsigned long long offset = in.get<unsigned long long>();
      if (b >= n_buffers) Reader::fail("bad buffer index");
      void* p = buffers[b] + offset;
      memcpy(slots[i].bytes, &p, sizeof p);
    }
    args[i] = slots[i].bytes;
  }
  fclose(in.f);

#if defined(__SANITIZE_ADDRESS__)
  // Dynamic shared memory past what the launch asked for is out of bounds.
  ASAN_POISON_MEMORY_REGION(emu_dynamic_shared + cfg->shared_mem, EMU_MAX_DYNAMIC_SHARED - cfg->shared_mem);
#endif
  fprintf(stderr, "EMU-LAUNCH %s\n", emu_launchers[launcher].name);
  int status = emu_launchers[launcher].launch(cfg, args.data());
  fprintf(stderr, "EMU-DONE %d\n", status);

  FILE* out = fopen(argv[2], "wb");
  if (!out) Reader::fail("cannot write the result file");
  auto put_text = [&](const char* s) {
    unsigned n = (unsigned)strlen(s);
    fwrite(&n, sizeof n, 1, out);
    fwrite(s, 1, n, out);
  };
  fwrite(&status, sizeof status, 1, out);
  put_text(cfg->message);
  put_text(cfg->warnings);
  for (unsigned i = 0; i < n_buffers; ++i) fwrite(buffers[i], 1, sizes[i], out);
  fclose(out);
  fflush(stdout);
  // Leave at once: threads of a given-up launch may still be parked.
  _exit(0);
}
