#include "runtime/compiler.h"

#include <dlfcn.h>
#include <link.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <system_error>

#include "runtime/kernel_cache.h"
#include "runtime/sha256.h"
#include "runtime/subprocess.h"

namespace thunder::runtime {
namespace {

// The first line of `compiler --version`, under the compile timeout (a compiler that hangs is killed).
const std::string& compiler_version(const std::string& compiler, double timeout_seconds) {
  static std::mutex mu;
  static std::string cached_for, version;
  std::lock_guard<std::mutex> lock(mu);
  if (cached_for != compiler) {
    ProcessResult r = run_process({compiler, "--version"}, timeout_seconds);
    // A run that failed (timed out, killed) is not remembered: keys without the version would not tell compilers
    // apart, nor match other processes' keys.
    if (r.status < 0)  // it never ran: run_process's output says why (not found in PATH)
      throw std::runtime_error(r.output + ": thunder's CPU kernels need a C++ compiler (g++: install "
                               "one, or put it on PATH)");
    if (r.status != 0 || r.timed_out)
      throw std::runtime_error("cannot read the C++ compiler's version (`" + compiler + " --version` " +
                               (r.timed_out ? std::string("timed out") : "exited with status " +
                                std::to_string(r.status)) + ")");
    version = r.output.substr(0, r.output.find('\n'));
    cached_for = compiler;
  }
  return version;
}

const std::string& cpu_features() {
  static const std::string flags = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("flags", 0) == 0) return line;
    return std::string();
  }();
  return flags;
}

// Errors of writing into the cache directory that a private directory elsewhere may not have.
bool directory_unusable(int err) {
  return err == EROFS || err == EACCES || err == EPERM || err == ENOSPC || err == EDQUOT;
}

// The key a loaded module exports ("" if none, or if its `thunder_cache_key` is not a function: an object that
// exports a variable by that name is not one of ours, and calling it would jump into data).
std::string exported_key(void* handle) {
  void* symbol = dlsym(handle, "thunder_cache_key");
  Dl_info info;
  ElfW(Sym)* entry = nullptr;
  if (!symbol || !dladdr1(symbol, &info, reinterpret_cast<void**>(&entry), RTLD_DL_SYMENT) || !entry ||
      ELF64_ST_TYPE(entry->st_info) != STT_FUNC)
    return "";
  return reinterpret_cast<const char* (*)()>(symbol)();
}

// dlopens the file open at `fd`, the entry for `key` (through /proc/self/fd, so the file loaded is the file
// checked). glibc knows a loaded object by every name it was opened with, and returns an object loaded as
// "/proc/self/fd/N" for any later file opened at that number: a number one is known by is skipped (a
// duplicate of `fd` at a higher number is used instead), unless that object is the module for `key`.
void* dlopen_fd(int fd, const std::string& key, std::string* error) {
  Fd duplicate;
  int use = fd;
  for (int tries = 0; tries < 65536; ++tries) {
    const std::string path = "/proc/self/fd/" + std::to_string(use);
    void* existing = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (existing && exported_key(existing) == key) return existing;  // loaded already (the same entry)
    if (!existing) {
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* e = dlerror();
        *error = e ? e : "dlopen failed";
      }
      return h;
    }
    dlclose(existing);
    const int next = fcntl(use, F_DUPFD_CLOEXEC, use + 1);
    if (next < 0) {
      *error = std::string("cannot duplicate a descriptor: ") + std::strerror(errno);
      return nullptr;
    }
    duplicate = Fd(next);
    use = next;
  }
  *error = "no free descriptor number to load through";
  return nullptr;
}

// Loads the verified entry open at `fd` and checks that it exports `key`; throws if it cannot be loaded.
std::shared_ptr<Library> load_entry(const Fd& fd, const std::string& key, const std::string& path) {
  std::string error;
  void* h = dlopen_fd(fd.get(), key, &error);
  if (!h && error.find("failed to map segment") != std::string::npos)  // a file system mounted noexec
    throw std::system_error(EACCES, std::generic_category(), "cannot load the kernel module " + path + ": " + error);
  if (!h) throw std::runtime_error("cannot load the kernel module " + path + ": " + error);
  auto library = std::make_shared<Library>(h);
  if (exported_key(h) != key) throw std::runtime_error("the kernel module " + path + " is not the entry for key " + key);
  return library;
}

// Compiles `source` into the entry for m.key in `dir` and loads it.
void compile_into(const CacheDir& dir, const std::string& source, const CompileOptions& o, Module& m) {
  const std::string src = temporary_name(m.key, "cc"), tmp = temporary_name(m.key, "so");
  write_new_file(dir, src, source + "\nextern \"C\" const char* thunder_cache_key() { return \"" + m.key + "\"; }\n");
  std::vector<std::string> argv = {o.compiler}, libs;
  for (const std::string& f : o.flags) (f.rfind("-l", 0) == 0 ? libs : argv).push_back(f);
  // Names relative to the directory the compiler runs in, entered through the checked descriptor: a path
  // would let whoever can rename a directory on the way swap in a directory of theirs mid-compile.
  argv.insert(argv.end(), {"-o", "./" + tmp, "./" + src});
  argv.insert(argv.end(), libs.begin(), libs.end());  // libraries after the source that needs them
  m.command = "cd " + command_line({dir.path}) + " && " + command_line(argv);
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = run_process(argv, o.timeout_seconds, dir.fd.get());
  m.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.timed_out || r.status != 0) {
    unlinkat(dir.fd.get(), tmp.c_str(), 0);
    if (r.timed_out) {
      unlinkat(dir.fd.get(), src.c_str(), 0);
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", o.timeout_seconds);
      throw std::runtime_error("kernel compilation timed out after " + std::string(limit) +
                               " s (THUNDER_COMPILE_TIMEOUT) and was killed:\n" + m.command + "\n" + r.output);
    }
    if (r.output.find("No space left on device") != std::string::npos) {  // the disk, not the source
      unlinkat(dir.fd.get(), src.c_str(), 0);
      throw std::system_error(ENOSPC, std::generic_category(),
                              "kernel compilation ran out of space in " + dir.path + " (errno " + std::to_string(ENOSPC) + "):\n" + r.output);
    }
    throw std::runtime_error("kernel compilation failed (source kept as " + dir.path + "/" + src +
                             " for inspection, removed once this process has ended):\n" +
                             m.command + "\n" + r.output);
  }
  unlinkat(dir.fd.get(), src.c_str(), 0);
  Fd entry;
  try {
    entry = commit_entry(dir, m.key, tmp);
  } catch (...) {
    unlinkat(dir.fd.get(), tmp.c_str(), 0);
    throw;
  }
  m.library = load_entry(entry, m.key, m.path);
}

}  // namespace

Library::~Library() {
  if (handle) dlclose(handle);
}

void* Module::symbol(const std::string& name) const {
  void* p = library ? dlsym(library->handle, name.c_str()) : nullptr;
  if (!p) throw std::runtime_error("kernel module " + path + " has no symbol " + name);
  return p;
}

std::string cache_key(const std::string& source, const CompileOptions& o) {
  Sha256 h;
  auto field = [&h](const std::string& s) {
    h.update(s);
    h.update("\0", 1);  // fields cannot run into each other
  };
  field(source);
  field(compiler_version(o.compiler, o.timeout_seconds));
  field(o.compiler);
  for (const std::string& f : o.flags) field(f);
  field(cpu_features());
  const auto d = h.digest();
  return to_hex(d.data(), 16);
}

std::shared_ptr<Module> load_module(const std::string& source, const CompileOptions& o) {
  if (o.cache_dir.empty()) throw std::invalid_argument("load_module: cache_dir is required");
  const uint64_t max_bytes = o.max_cache_bytes ? o.max_cache_bytes : default_max_cache_bytes();  // checked first
  auto m = std::make_shared<Module>();
  m->key = cache_key(source, o);
  CacheDir dir = open_cache_dir(o.cache_dir);
  for (int attempt = 0;; ++attempt) {
    m->cache_dir = dir.path;
    m->warning = dir.warning;
    m->path = dir.path + "/" + m->key + ".so";
    if (Fd entry = open_entry(dir, m->key)) {
      try {
        m->library = load_entry(entry, m->key, m->path);
        m->cache_hit = true;
        return m;
      } catch (const std::runtime_error&) {
        // Verified but not loadable (built for another machine, say): rebuilt below.
      }
    }
    try {
      compile_into(dir, source, o, *m);
      break;
    } catch (const std::system_error& e) {
      if (attempt > 0 || !dir.warning.empty() || !directory_unusable(e.code().value())) throw;
      dir = fallback_cache_dir(o.cache_dir, std::string("cannot write to it: ") + e.what());
    }
  }
  evict_entries(dir, max_bytes, m->key);
  return m;
}

}  // namespace thunder::runtime
