// cuda_emu.h: enough of CUDA C for the course's kernels to compile with g++
// and run on the CPU, one block at a time (runtime.cpp says how its threads run).
//
// Every kernel the emulator builds is compiled with this header in front of
// it.  Students may read it to see what a CUDA builtin "is"; the machinery
// behind it (threads, barriers, warp exchanges, atomics, memory counters)
// lives in runtime.cpp, which is compiled once and shared by all kernels.
//
// What it does NOT model, and a GPU does:
//   - warp lock-step: the 32 threads of a warp run independently; only the
//     *_sync warp functions and __syncthreads() make threads meet;
//   - weak memory ordering: the CPU's memory model is stronger than the GPU's,
//     so a missing __threadfence() or volatile is not noticed;
//   - timing: nothing here says how fast a kernel is on a GPU;
//   - blocks running at the same time: blocks run one after another, so a race
//     between two blocks is never seen.
#pragma once
#define PICOTORCH_CUDA_EMULATOR 1

#include <math.h>
#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------- keywords
// On the CPU every function is callable from everywhere, so the execution
// space qualifiers disappear.  __restrict__ is GCC's own keyword already.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
// The build step rewrites `__shared__` declarations so that the runtime knows
// where shared memory is (emulator/build.py, rewrite_shared).  A __shared__
// that only appears after macro expansion still gets block-wide storage.
#define __shared__ static

// ---------------------------------------------------------------- types
struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

// Same layout and alignment as CUDA's vector_types.h, so that a float4 load
// reads 16 aligned bytes here as on the GPU.
#define EMU_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; \
  inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define EMU_VEC3(T, N) struct N##3 { T x, y, z; }; \
  inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define EMU_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
EMU_VEC2(float, float, 8)   EMU_VEC3(float, float)   EMU_VEC4(float, float, 16)
EMU_VEC2(double, double, 16)
EMU_VEC2(int, int, 8)       EMU_VEC3(int, int)       EMU_VEC4(int, int, 16)
EMU_VEC2(unsigned int, uint, 8)                      EMU_VEC4(unsigned int, uint, 16)
EMU_VEC2(long long, longlong, 16)
EMU_VEC4(unsigned char, uchar, 4)                    EMU_VEC4(signed char, char, 4)
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }
#undef EMU_VEC2
#undef EMU_VEC3
#undef EMU_VEC4

// ---------------------------------------------------------------- runtime
extern "C" {
// threadIdx differs per thread; the others are the same for every thread of
// a block (blockIdx) or of the launch, so they are plain globals that the
// runtime sets before it starts a block.
extern __thread uint3 emu_thread_idx;
extern uint3 emu_block_idx;
extern dim3 emu_block_dim;
extern dim3 emu_grid_dim;
// Backing store of `extern __shared__ T name[];`.  Its size is the launch's
// shared_mem; the build step turns each such declaration into a pointer here.
extern unsigned char emu_dynamic_shared[];

void emu_syncthreads(int line);
int emu_syncthreads_reduce(int predicate, int op, int line);
// Every thread named in `mask` hands in `value`; on return values[lane] holds
// each participant's value and *present says which lanes took part.
void emu_warp_exchange(unsigned mask, unsigned long long value, const char* what, int line,
                       unsigned long long* values, unsigned* present);
unsigned emu_activemask(void);
int emu_lane_id(void);
void emu_warn_undefined_lane(const char* what, int line, int src_lane);
void emu_register_shared(const void* module, void* address, unsigned long long bytes, const char* name);
// The "bounds" check's shared variables: heap blocks, which AddressSanitizer guards.
void* emu_shared_alloc(unsigned long long bytes, const char* name);
void emu_threadfence(void);

int emu_atomic_i32(int op, int* p, int v, int extra);
unsigned emu_atomic_u32(int op, unsigned* p, unsigned v, unsigned extra);
long long emu_atomic_i64(int op, long long* p, long long v, long long extra);
unsigned long long emu_atomic_u64(int op, unsigned long long* p, unsigned long long v, unsigned long long extra);
float emu_atomic_f32(int op, float* p, float v);
double emu_atomic_f64(int op, double* p, double v);
}

#define threadIdx (static_cast<const uint3&>(emu_thread_idx))
#define blockIdx (static_cast<const uint3&>(emu_block_idx))
#define blockDim (static_cast<const dim3&>(emu_block_dim))
#define gridDim (static_cast<const dim3&>(emu_grid_dim))
static constexpr int warpSize = 32;

// Hidden per shared object, so each compiled kernel module registers its
// shared variables under its own key.
extern void* __dso_handle __attribute__((visibility("hidden")));

namespace emu {
// Registers one __shared__ variable the first time a thread reaches its
// declaration (a function-local static), or when the module loads (a
// namespace-scope one).  Compiled out under the sanitizers, which find shared
// memory by themselves and whose reports a guard variable would blur.
struct SharedRegistration {
  SharedRegistration(void* p, unsigned long long n, const char* name) {
    emu_register_shared(&__dso_handle, p, n, name);
  }
};
}  // namespace emu
namespace emu {
template <class T>
inline T* shared_heap(const char* name) {
  return static_cast<T*>(emu_shared_alloc(sizeof(T), name));
}
}  // namespace emu
#ifdef EMU_SANITIZE
#define EMU_SHARED(v)
#else
#define EMU_SHARED(v) static ::emu::SharedRegistration emu_shared_registration_##v(&(v), sizeof(v), #v);
#endif

// ---------------------------------------------------------------- barriers
// __builtin_LINE() as a default argument is the caller's line: the #line
// directive in front of the student's source makes it *their* line number,
// which is what deadlock and divergence messages quote.
inline void __syncthreads(int line = __builtin_LINE()) { emu_syncthreads(line); }
inline int __syncthreads_count(int p, int line = __builtin_LINE()) { return emu_syncthreads_reduce(p, 0, line); }
inline int __syncthreads_and(int p, int line = __builtin_LINE()) { return emu_syncthreads_reduce(p, 1, line); }
inline int __syncthreads_or(int p, int line = __builtin_LINE()) { return emu_syncthreads_reduce(p, 2, line); }
inline void __threadfence() { emu_threadfence(); }
inline void __threadfence_block() { emu_threadfence(); }

// ---------------------------------------------------------------- warps
namespace emu {
template <class T>
inline unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
  unsigned long long b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T from_bits(unsigned long long b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
// A read from a lane that did not take part is undefined on a GPU.  Here it
// is all one bits (NaN for floats, -1 for integers) and a warning, so that the
// bug shows in the result instead of passing by luck.
template <class T>
inline T shuffle_result(const char* what, int line, const unsigned long long* vals, unsigned present,
                        int src) {
  if (src < 0 || src > 31 || !((present >> src) & 1u)) {
    emu_warn_undefined_lane(what, line, src);
    return from_bits<T>(~0ull);
  }
  return from_bits<T>(vals[src]);
}
}  // namespace emu

#define EMU_EXCHANGE(what, mask, v)           \
  unsigned long long vals[32];                \
  unsigned present;                           \
  emu_warp_exchange(mask, v, what, line, vals, &present)

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize, int line = __builtin_LINE()) {
  EMU_EXCHANGE("__shfl_sync", mask, emu::to_bits(var));
  int lane = emu_lane_id();
  int src = (lane & ~(width - 1)) + (src_lane & (width - 1));
  return emu::shuffle_result<T>("__shfl_sync", line, vals, present, src);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, int line = __builtin_LINE()) {
  EMU_EXCHANGE("__shfl_down_sync", mask, emu::to_bits(var));
  int lane = emu_lane_id();
  if ((lane & (width - 1)) + (int)delta >= width) return var;  // off the end of its segment: keeps its own
  return emu::shuffle_result<T>("__shfl_down_sync", line, vals, present, lane + (int)delta);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, int line = __builtin_LINE()) {
  EMU_EXCHANGE("__shfl_up_sync", mask, emu::to_bits(var));
  int lane = emu_lane_id();
  if ((lane & (width - 1)) < (int)delta) return var;
  return emu::shuffle_result<T>("__shfl_up_sync", line, vals, present, lane - (int)delta);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize, int line = __builtin_LINE()) {
  EMU_EXCHANGE("__shfl_xor_sync", mask, emu::to_bits(var));
  int lane = emu_lane_id();
  int src = lane ^ lane_mask;
  if (src >= ((lane / width) + 1) * width) return var;  // later segments are out of reach
  return emu::shuffle_result<T>("__shfl_xor_sync", line, vals, present, src);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
  EMU_EXCHANGE("__ballot_sync", mask, predicate != 0);
  unsigned r = 0;
  for (int l = 0; l < 32; ++l)
    if (((present >> l) & 1u) && vals[l]) r |= 1u << l;
  return r;
}
inline int __any_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
  return __ballot_sync(mask, predicate, line) != 0;
}
inline int __all_sync(unsigned mask, int predicate, int line = __builtin_LINE()) {
  EMU_EXCHANGE("__all_sync", mask, predicate != 0);
  for (int l = 0; l < 32; ++l)
    if (((present >> l) & 1u) && !vals[l]) return 0;
  return 1;
}
inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE()) {
  EMU_EXCHANGE("__syncwarp", mask, 0);
  (void)vals;
}
inline unsigned __activemask() { return emu_activemask(); }
#define EMU_REDUCE_SYNC(NAME, T, EXPR)                                          \
  inline T NAME(unsigned mask, T value, int line = __builtin_LINE()) {           \
    EMU_EXCHANGE(#NAME, mask, emu::to_bits(value));                             \
    bool first = true;                                                          \
    T r = 0;                                                                    \
    for (int l = 0; l < 32; ++l) {                                              \
      if (!((present >> l) & 1u)) continue;                                     \
      T v = emu::from_bits<T>(vals[l]);                                         \
      r = first ? v : (EXPR);                                                   \
      first = false;                                                            \
    }                                                                           \
    return r;                                                                   \
  }
EMU_REDUCE_SYNC(__reduce_add_sync, unsigned, r + v)
EMU_REDUCE_SYNC(__reduce_add_sync, int, r + v)
EMU_REDUCE_SYNC(__reduce_min_sync, unsigned, v < r ? v : r)
EMU_REDUCE_SYNC(__reduce_min_sync, int, v < r ? v : r)
EMU_REDUCE_SYNC(__reduce_max_sync, unsigned, v > r ? v : r)
EMU_REDUCE_SYNC(__reduce_max_sync, int, v > r ? v : r)
EMU_REDUCE_SYNC(__reduce_and_sync, unsigned, r & v)
EMU_REDUCE_SYNC(__reduce_or_sync, unsigned, r | v)
EMU_REDUCE_SYNC(__reduce_xor_sync, unsigned, r ^ v)
#undef EMU_REDUCE_SYNC
#undef EMU_EXCHANGE

// ---------------------------------------------------------------- atomics
// The operation codes shared with runtime.cpp (emu_atomic_*).
enum { EMU_ADD, EMU_SUB, EMU_EXCH, EMU_MIN, EMU_MAX, EMU_AND, EMU_OR, EMU_XOR, EMU_CAS, EMU_INC, EMU_DEC };
#define EMU_INT_ATOMICS(T, F)                                                  \
  inline T atomicAdd(T* p, T v) { return F(EMU_ADD, p, v, 0); }                 \
  inline T atomicSub(T* p, T v) { return F(EMU_SUB, p, v, 0); }                 \
  inline T atomicExch(T* p, T v) { return F(EMU_EXCH, p, v, 0); }               \
  inline T atomicMin(T* p, T v) { return F(EMU_MIN, p, v, 0); }                 \
  inline T atomicMax(T* p, T v) { return F(EMU_MAX, p, v, 0); }                 \
  inline T atomicAnd(T* p, T v) { return F(EMU_AND, p, v, 0); }                 \
  inline T atomicOr(T* p, T v) { return F(EMU_OR, p, v, 0); }                   \
  inline T atomicXor(T* p, T v) { return F(EMU_XOR, p, v, 0); }                 \
  inline T atomicCAS(T* p, T compare, T v) { return F(EMU_CAS, p, v, compare); }
EMU_INT_ATOMICS(int, emu_atomic_i32)
EMU_INT_ATOMICS(unsigned int, emu_atomic_u32)
EMU_INT_ATOMICS(long long, emu_atomic_i64)
EMU_INT_ATOMICS(unsigned long long, emu_atomic_u64)
#undef EMU_INT_ATOMICS
inline unsigned atomicInc(unsigned* p, unsigned v) { return emu_atomic_u32(EMU_INC, p, v, 0); }
inline unsigned atomicDec(unsigned* p, unsigned v) { return emu_atomic_u32(EMU_DEC, p, v, 0); }
inline float atomicAdd(float* p, float v) { return emu_atomic_f32(EMU_ADD, p, v); }
inline float atomicExch(float* p, float v) { return emu_atomic_f32(EMU_EXCH, p, v); }
inline float atomicMax(float* p, float v) { return emu_atomic_f32(EMU_MAX, p, v); }
inline float atomicMin(float* p, float v) { return emu_atomic_f32(EMU_MIN, p, v); }
inline double atomicAdd(double* p, double v) { return emu_atomic_f64(EMU_ADD, p, v); }
inline double atomicExch(double* p, double v) { return emu_atomic_f64(EMU_EXCH, p, v); }

// ---------------------------------------------------------------- math
// <math.h> already gives expf, sqrtf, fmaxf, tanhf, erff, ... and the float
// overloads of exp, sqrt, ... in the global namespace, as CUDA does.
// The fast-math intrinsics are exact here: a GPU's are a few ulp off.
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline int __float_as_int(float x) { return emu::from_bits<int>(emu::to_bits(x)); }
inline unsigned __float_as_uint(float x) { return emu::from_bits<unsigned>(emu::to_bits(x)); }
inline float __int_as_float(int x) { return emu::from_bits<float>(emu::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return emu::from_bits<float>(emu::to_bits(x)); }
inline long long __double_as_longlong(double x) { return emu::from_bits<long long>(emu::to_bits(x)); }
inline double __longlong_as_double(long long x) { return emu::from_bits<double>(emu::to_bits(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mul24(int x, int y) { return x * y; }
inline unsigned __umul24(unsigned x, unsigned y) { return x * y; }
inline int __mulhi(int x, int y) { return (int)(((long long)x * y) >> 32); }
inline unsigned __umulhi(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x * y) >> 32); }
// CUDA's min/max are overloaded for every arithmetic type, mixed ones too.
template <class A, class B>
inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type R;
  return (R)a > (R)b ? (R)a : (R)b;
}
template <class A, class B>
inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type R;
  return (R)a < (R)b ? (R)a : (R)b;
}
// Read-only cache loads are plain loads on the CPU.
template <class T>
inline T __ldg(const T* p) { return *p; }

// ---------------------------------------------------------------- launching
// The build step appends one launcher per kernel: it unpacks the void*
// argument array with the kernel's own parameter types, as cuLaunchKernel does.
namespace emu {
template <class... P, std::size_t... I>
inline void invoke(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(*static_cast<typename std::remove_cv<typename std::remove_reference<P>::type>::type*>(args[I])...);
}
template <class... P>
inline void invoke(void (*kernel)(P...), void** args) {
  invoke(kernel, args, std::index_sequence_for<P...>{});
}
// 1 for a pointer parameter, 2 for a floating-point one, 3 for an integer
// one, 0 otherwise; the Python side checks its own reading of the signature
// against these before the first launch.
template <class P>
constexpr int kind_of() {
  return std::is_pointer<P>::value ? 1 : std::is_floating_point<P>::value ? 2 : std::is_integral<P>::value ? 3 : 0;
}
template <class... P>
inline int describe(void (*)(P...), int* sizes, int* kinds, int capacity) {
  int s[] = {0, (int)sizeof(P)...};
  int k[] = {0, kind_of<P>()...};
  int n = (int)sizeof...(P);
  for (int i = 0; i < n && i < capacity; ++i) {
    sizes[i] = s[i + 1];
    kinds[i] = k[i + 1];
  }
  return n;
}
}  // namespace emu

struct emu_launch_config;
typedef void (*emu_thunk)(void** args);
extern "C" int emu_run(emu_launch_config* config, emu_thunk thunk, void** args, const void* module);
