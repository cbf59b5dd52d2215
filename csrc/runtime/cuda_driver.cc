#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <stdexcept>

namespace thunder::runtime {
namespace {

// The driver API functions used, as cuda.h declares them (handles as opaque pointers).
struct Driver {
  std::string error;  // why it cannot be used ("" if it can)
  int (*init)(unsigned) = nullptr;
  int (*error_string)(int, const char**) = nullptr;
  int (*ctx_get_current)(void**) = nullptr;
  int (*module_load_data)(void**, const void*) = nullptr;
  int (*module_unload)(void*) = nullptr;
  int (*module_get_function)(void**, void*, const char*) = nullptr;
  int (*launch_kernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                       void**) = nullptr;
};

const Driver& driver() {
  static const Driver d = [] {
    Driver d;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      const char* e = dlerror();
      d.error = std::string("the CUDA driver (libcuda.so.1) cannot be loaded: ") + (e ? e : "not found") +
                " (no NVIDIA driver on this machine?)";
      return d;
    }
    auto sym = [&](auto& fn, const char* name) {
      void* p = dlsym(h, name);
      if (!p && d.error.empty()) d.error = std::string("the CUDA driver has no ") + name;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    sym(d.init, "cuInit");
    sym(d.error_string, "cuGetErrorString");
    sym(d.ctx_get_current, "cuCtxGetCurrent");
    sym(d.module_load_data, "cuModuleLoadData");
    sym(d.module_unload, "cuModuleUnload");
    sym(d.module_get_function, "cuModuleGetFunction");
    sym(d.launch_kernel, "cuLaunchKernel");
    if (d.error.empty())
      if (int r = d.init(0); r != 0) d.error = "cuInit failed with CUDA error " + std::to_string(r);
    return d;
  }();
  return d;
}

const Driver& checked_driver() {
  const Driver& d = driver();
  if (!d.error.empty()) throw std::runtime_error("thunder: " + d.error);
  return d;
}

void check(const Driver& d, int r, const std::string& what) {
  if (r == 0) return;
  const char* text = nullptr;
  if (d.error_string) d.error_string(r, &text);
  throw std::runtime_error("thunder: " + what + " failed: CUDA error " + std::to_string(r) + (text ? std::string(" (") + text + ")" : ""));
}

}  // namespace

bool cuda_driver_available(std::string* why) {
  const Driver& d = driver();
  if (why) *why = d.error;
  return d.error.empty();
}

CudaModule::CudaModule(std::shared_ptr<const CudaImage> image) : image_(std::move(image)) {}

CudaModule::~CudaModule() {
  const Driver& d = driver();
  if (!d.error.empty()) return;
  // A module is unloaded in any context (the driver knows its context); errors at teardown are ignored.
  for (const auto& [ctx, module] : modules_) d.module_unload(reinterpret_cast<void*>(module));
}

uintptr_t CudaModule::function(const std::string& name) {
  const Driver& d = checked_driver();
  void* ctx = nullptr;
  check(d, d.ctx_get_current(&ctx), "cuCtxGetCurrent");
  if (ctx == nullptr) throw std::runtime_error("thunder: no CUDA context is current on this thread (torch makes one on first use)");
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = std::make_pair(reinterpret_cast<uintptr_t>(ctx), name);
  if (auto it = functions_.find(key); it != functions_.end()) return it->second;
  auto mod = modules_.find(key.first);
  if (mod == modules_.end()) {
    void* m = nullptr;
    int r = image_->cubin.empty() ? 1 : d.module_load_data(&m, image_->cubin.data());
    if (r != 0) {  // another architecture (or no CUBIN): the driver compiles the PTX
      r = d.module_load_data(&m, image_->ptx.c_str());
      check(d, r, "cuModuleLoadData (PTX of " + image_->path + ")");
      from_ptx_ = true;
    }
    mod = modules_.emplace(key.first, reinterpret_cast<uintptr_t>(m)).first;
  }
  void* f = nullptr;
  check(d, d.module_get_function(&f, reinterpret_cast<void*>(mod->second), name.c_str()), "cuModuleGetFunction(" + name + ")");
  return functions_[key] = reinterpret_cast<uintptr_t>(f);
}

void launch_cuda(uintptr_t function, int64_t grid, int block, uintptr_t stream, const std::vector<uint64_t>& args) {
  const Driver& d = checked_driver();
  if (grid <= 0 || grid > 0x7fffffff || block <= 0 || block > 1024)
    throw std::invalid_argument("thunder: launch_cuda: grid " + std::to_string(grid) + ", block " + std::to_string(block));
  std::vector<uint64_t> values = args;  // the kernel reads each argument through its pointer
  std::vector<void*> params;
  params.reserve(values.size());
  for (uint64_t& v : values) params.push_back(&v);
  check(d,
        d.launch_kernel(reinterpret_cast<void*>(function), static_cast<unsigned>(grid), 1, 1, static_cast<unsigned>(block),
                        1, 1, 0, reinterpret_cast<void*>(stream), params.data(), nullptr),
        "cuLaunchKernel");
}

}  // namespace thunder::runtime
