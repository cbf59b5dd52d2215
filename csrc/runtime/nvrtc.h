// CUDA kernels compiled at run time with NVRTC, loaded by dlopen only when asked for (nothing CUDA is linked at
// build time: the core imports where no CUDA library is installed), cached on disk with the CPU kernel cache's
// rules (runtime/kernel_cache.h: a private directory, entries sealed with their SHA-256, checked before use,
// evicted least recently used first), keyed also by the GPU architecture and NVRTC's version.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace thunder::runtime {

/// What NVRTC compiles with.
struct NvrtcOptions {
  /// The path of NVRTC (libnvrtc.so.13 of the `nvidia-cuda-nvrtc` wheel). The builtins library beside it
  /// (libnvrtc-builtins.so.*) is loaded first, by its absolute path and RTLD_GLOBAL: 13.0's libnvrtc has no
  /// $ORIGIN RPATH, and every compile would fail to find it.
  std::string library;
  std::string arch = "sm_90";     // CUBIN for this architecture (PTX kept as the fallback)
  std::vector<std::string> flags = {"-std=c++17", "--ptxas-options=-v", "-w"};
  std::string cache_dir;          // required
  uint64_t max_cache_bytes = 0;   // 0: the default (default_max_cache_bytes)
};

/// The resources ptxas reported for one kernel (--ptxas-options=-v).
struct KernelResources {
  std::string name;
  int registers = 0;
  int64_t spill_stores = 0, spill_loads = 0, stack_bytes = 0;
};

/// A compiled CUDA translation unit.
struct CudaImage {
  std::string cubin;   // for `arch`
  std::string ptx;     // the fallback a driver can JIT for a newer GPU
  std::string log;     // NVRTC's program log (ptxas' report)
  std::vector<KernelResources> kernels;
  std::string key, path, arch, nvrtc_version;
  std::string command;  // NVRTC's version and options, as a command line ("" on a cache hit)
  bool cache_hit = false;
  double compile_seconds = 0;  // 0 on a cache hit
  std::string cache_dir, warning;  // as runtime::Module's
};

/// NVRTC's version ("13.0") of the library at `library`, loading it (once per path) if needed. Throws
/// std::runtime_error naming the path and dlopen's error if it cannot be loaded.
std::string nvrtc_version(const std::string& library);

/// The image for `source` from the cache, compiled by NVRTC first if absent or if the entry fails a check.
/// Throws std::runtime_error with NVRTC's log if the source does not compile.
std::shared_ptr<CudaImage> compile_cuda(const std::string& source, const NvrtcOptions& options);

/// The per-kernel registers, spills and stack of ptxas' verbose report.
std::vector<KernelResources> parse_ptxas_report(const std::string& log);

}  // namespace thunder::runtime
