// runtime.h: what the emulator's runtime, its harness and the Python side
// (emulator/launch.py, class LaunchConfig) agree on.  Change one, change all
// three; the cache key includes this file, so old builds are not reused.
#pragma once

// The most dynamic shared memory one block can ask for on an H100/H200
// (227 KiB, after cudaFuncSetAttribute); the GPU path allows the same.
#define EMU_MAX_DYNAMIC_SHARED 232448

enum {
  EMU_GLOBAL_LOADS = 0,
  EMU_GLOBAL_STORES = 1,
  EMU_GLOBAL_LOAD_BYTES = 2,
  EMU_GLOBAL_STORE_BYTES = 3,
  EMU_SHARED_LOADS = 4,
  EMU_SHARED_STORES = 5,
  EMU_SHARED_LOAD_BYTES = 6,
  EMU_SHARED_STORE_BYTES = 7,
  EMU_GLOBAL_ATOMICS = 8,
  EMU_SHARED_ATOMICS = 9,
  EMU_COUNTERS = 10
};

// The bytes of one tensor argument: what counts as global memory.
struct emu_range {
  unsigned long long lo, hi;
};

struct emu_launch_config {
  // in
  unsigned grid[3];
  unsigned block[3];
  unsigned long long shared_mem;
  const emu_range* buffers;
  unsigned n_buffers;
  double timeout_s;
  // out
  unsigned long long counts[EMU_COUNTERS];
  unsigned long long static_shared_bytes;
  int status;  // 0: ran to the end; 1: see message
  // An out-of-bounds access caught before it happened (ordinary launches
  // only): the kernel library's code offset of the access, for addr2line.
  int fault;   // 0: none; 1: out of bounds
  int fault_store;
  unsigned fault_size;
  unsigned fault_buffer;          // which tensor range it was next to
  long long fault_offset;         // bytes from that tensor's first byte
  unsigned long long fault_pc;    // offset in fault_module
  char fault_module[1024];
  unsigned fault_block[3];
  unsigned fault_thread[3];
  char message[8192];
  char warnings[8192];
  // A data race on shared memory (ordinary launches): two threads of a block
  // touched the same bytes, one of them writing, with no barrier between.
  // The first one found; `race` counts them all.
  unsigned long long race;
  int race_store, race_other_store;
  unsigned race_thread[3], race_other_thread[3], race_block[3];
  unsigned long long race_pc, race_other_pc;   // offsets in race_module
  char race_module[1024];
  char race_variable[64];         // the __shared__ array; "" for dynamic shared memory
  unsigned long long race_offset; // bytes from the start of that array
};

extern "C" void emu_request_abort(void);
