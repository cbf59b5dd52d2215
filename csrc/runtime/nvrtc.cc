#include "runtime/nvrtc.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "runtime/kernel_cache.h"
#include "runtime/sha256.h"

namespace thunder::runtime {
namespace {

// NVRTC's C API, as its header declares it (the header is not needed at build time).
using Program = void*;
struct Nvrtc {
  void* handle = nullptr;
  std::string version;
  uint64_t library_bytes = 0;  // the library's size: a rebuilt NVRTC of the same version gets other keys
  int (*version_fn)(int*, int*) = nullptr;
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*ptx_size)(Program, size_t*) = nullptr;
  int (*ptx)(Program, char*) = nullptr;
  int (*cubin_size)(Program, size_t*) = nullptr;
  int (*cubin)(Program, char*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  const char* (*error)(int) = nullptr;
};

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Loads libnvrtc-builtins (by absolute path, RTLD_GLOBAL) from NVRTC's directory, then NVRTC itself.
const Nvrtc& load_nvrtc(const std::string& library) {
  static std::mutex mu;
  static std::map<std::string, Nvrtc> loaded;  // a registry built once per path; the libraries stay loaded
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(library); it != loaded.end()) return it->second;
  if (library.empty() || library[0] != '/')
    throw std::runtime_error("NVRTC: an absolute path of libnvrtc.so is needed, got '" + library +
                             "' (install nvidia-cuda-nvrtc, or set THUNDER_NVRTC_LIBRARY)");
  const std::string dir = dir_of(library);
  if (DIR* d = opendir(dir.c_str())) {
    std::string builtins;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("libnvrtc-builtins.so", 0) == 0 && name.size() > builtins.size()) builtins = name;
    }
    closedir(d);
    if (!builtins.empty() && !dlopen((dir + "/" + builtins).c_str(), RTLD_NOW | RTLD_GLOBAL))
      throw std::runtime_error("NVRTC: cannot load " + dir + "/" + builtins + ": " + dlerror());
  }
  Nvrtc n;
  n.handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!n.handle) throw std::runtime_error("NVRTC: cannot load " + library + ": " + dlerror());
  auto sym = [&](auto& fn, const char* name) {
    void* p = dlsym(n.handle, name);
    if (!p) throw std::runtime_error("NVRTC: " + library + " has no " + name);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym(n.version_fn, "nvrtcVersion");
  sym(n.create, "nvrtcCreateProgram");
  sym(n.compile, "nvrtcCompileProgram");
  sym(n.log_size, "nvrtcGetProgramLogSize");
  sym(n.log, "nvrtcGetProgramLog");
  sym(n.ptx_size, "nvrtcGetPTXSize");
  sym(n.ptx, "nvrtcGetPTX");
  sym(n.cubin_size, "nvrtcGetCUBINSize");
  sym(n.cubin, "nvrtcGetCUBIN");
  sym(n.destroy, "nvrtcDestroyProgram");
  sym(n.error, "nvrtcGetErrorString");
  int major = 0, minor = 0;
  n.version_fn(&major, &minor);
  n.version = std::to_string(major) + "." + std::to_string(minor);
  struct stat st;
  if (stat(library.c_str(), &st) == 0) n.library_bytes = static_cast<uint64_t>(st.st_size);
  return loaded.emplace(library, n).first->second;
}

// The cache entry's payload: a magic, then the CUBIN, the PTX and the log, each after its length (8 bytes,
// little-endian).
constexpr char kMagic[8] = {'T', 'H', 'C', 'U', 'D', 'A', '0', '1'};

std::string pack(const CudaImage& image) {
  std::string out(kMagic, 8);
  for (const std::string* part : {&image.cubin, &image.ptx, &image.log}) {
    const uint64_t n = part->size();
    for (int i = 0; i < 8; ++i) out += static_cast<char>(n >> (8 * i));
    out += *part;
  }
  return out;
}

bool unpack(const std::string& payload, CudaImage& image) {
  if (payload.size() < 8 || payload.compare(0, 8, kMagic, 8) != 0) return false;
  size_t at = 8;
  for (std::string* part : {&image.cubin, &image.ptx, &image.log}) {
    if (payload.size() - at < 8) return false;
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(payload[at + i])) << (8 * i);
    at += 8;
    if (payload.size() - at < n) return false;
    *part = payload.substr(at, n);
    at += n;
  }
  return at == payload.size();
}

// Compiles with NVRTC: CUBIN for o.arch, PTX, and the log.
void nvrtc_compile(const Nvrtc& n, const std::string& source, const NvrtcOptions& o, CudaImage& image) {
  Program prog = nullptr;
  if (int r = n.create(&prog, source.c_str(), "thunder_kernels.cu", 0, nullptr, nullptr); r != 0)
    throw std::runtime_error(std::string("NVRTC: nvrtcCreateProgram failed: ") + n.error(r));
  std::vector<std::string> args = {"-arch=" + o.arch};
  args.insert(args.end(), o.flags.begin(), o.flags.end());
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  const int r = n.compile(prog, static_cast<int>(argv.size()), argv.data());
  size_t size = 0;
  n.log_size(prog, &size);
  image.log.assign(size, '\0');
  if (size) n.log(prog, image.log.data());
  while (!image.log.empty() && image.log.back() == '\0') image.log.pop_back();
  if (r != 0) {
    n.destroy(&prog);
    throw std::runtime_error(std::string("NVRTC: compiling the CUDA kernels for ") + o.arch + " failed (" + n.error(r) +
                             "):\n" + image.log);
  }
  n.ptx_size(prog, &size);
  image.ptx.assign(size, '\0');
  n.ptx(prog, image.ptx.data());
  while (!image.ptx.empty() && image.ptx.back() == '\0') image.ptx.pop_back();
  n.cubin_size(prog, &size);
  image.cubin.assign(size, '\0');
  if (size) n.cubin(prog, image.cubin.data());
  n.destroy(&prog);
}

bool directory_unusable(int err) {
  return err == EROFS || err == EACCES || err == EPERM || err == ENOSPC || err == EDQUOT;
}

}  // namespace

std::string nvrtc_version(const std::string& library) { return load_nvrtc(library).version; }

std::vector<KernelResources> parse_ptxas_report(const std::string& log) {
  // ptxas info    : Compiling entry function 'k' for 'sm_90'
  // ptxas info    : Function properties for k
  //     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  // ptxas info    : Used 12 registers, used 0 barriers, 400 bytes cmem[0]
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex regs(R"(Used (\d+) registers)");
  std::vector<KernelResources> out;
  std::istringstream is(log);
  std::string line;
  std::smatch m;
  while (std::getline(is, line)) {
    if (std::regex_search(line, m, entry)) {
      out.push_back({m[1].str()});
    } else if (!out.empty() && std::regex_search(line, m, frame)) {
      out.back().stack_bytes = std::stoll(m[1].str());
      out.back().spill_stores = std::stoll(m[2].str());
      out.back().spill_loads = std::stoll(m[3].str());
    } else if (!out.empty() && std::regex_search(line, m, regs)) {
      out.back().registers = std::stoi(m[1].str());
    }
  }
  return out;
}

std::shared_ptr<CudaImage> compile_cuda(const std::string& source, const NvrtcOptions& o) {
  if (o.cache_dir.empty()) throw std::invalid_argument("compile_cuda: cache_dir is required");
  const uint64_t max_bytes = o.max_cache_bytes ? o.max_cache_bytes : default_max_cache_bytes();
  const Nvrtc& n = load_nvrtc(o.library);
  auto image = std::make_shared<CudaImage>();
  image->arch = o.arch;
  image->nvrtc_version = n.version;
  Sha256 h;
  auto field = [&h](const std::string& s) {
    h.update(s);
    h.update("\0", 1);
  };
  field(source);
  field("nvrtc " + n.version + " " + std::to_string(n.library_bytes));
  field(o.arch);
  for (const std::string& f : o.flags) field(f);
  const auto d = h.digest();
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < 16; ++i) image->key += std::string{hex[d[i] >> 4], hex[d[i] & 15]};

  CacheDir dir = open_cache_dir(o.cache_dir);
  for (int attempt = 0;; ++attempt) {
    image->cache_dir = dir.path;
    image->warning = dir.warning;
    image->path = dir.path + "/" + image->key + kCudaModule;
    if (Fd entry = open_entry(dir, image->key, nullptr, kCudaModule)) {
      std::string bytes;
      const size_t trailer = entry_trailer("", image->key).size();
      if (read_whole_file(entry.get(), &bytes) && verify_entry_bytes(bytes, image->key) &&
          unpack(bytes.substr(0, bytes.size() - trailer), *image)) {
        image->cache_hit = true;
        image->kernels = parse_ptxas_report(image->log);
        return image;
      }
    }
    image->command = "nvrtc " + n.version + " -arch=" + o.arch;
    for (const std::string& f : o.flags) image->command += " " + f;
    const auto start = std::chrono::steady_clock::now();
    nvrtc_compile(n, source, o, *image);
    image->compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    image->kernels = parse_ptxas_report(image->log);
    const std::string tmp = temporary_name(image->key, "cuda");
    try {
      write_new_file(dir, tmp, pack(*image));
      try {
        commit_entry(dir, image->key, tmp, kCudaModule);
      } catch (...) {
        unlinkat(dir.fd.get(), tmp.c_str(), 0);
        throw;
      }
      break;
    } catch (const std::system_error& e) {
      if (attempt > 0 || !dir.warning.empty() || !directory_unusable(e.code().value())) throw;
      dir = fallback_cache_dir(o.cache_dir, std::string("cannot write to it: ") + e.what());
    }
  }
  evict_entries(dir, max_bytes, image->key);
  return image;
}

}  // namespace thunder::runtime
