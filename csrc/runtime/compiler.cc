#include "runtime/compiler.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>

namespace thunder::runtime {
namespace {

// FNV-1a, 64 bit: stable across runs and machines, unlike std::hash.
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string run_capture(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run: " + command);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  *status = pclose(pipe);
  return out;
}

const std::string& compiler_version(const std::string& compiler) {
  static std::mutex mu;
  static std::string cached_for, version;
  std::lock_guard<std::mutex> lock(mu);
  if (cached_for != compiler) {
    int status = 0;
    version = run_capture(compiler + " --version", &status);
    version = version.substr(0, version.find('\n'));
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

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
}

std::string unique_suffix() {
  static std::mt19937_64 rng(std::random_device{}());
  return std::to_string(getpid()) + "." + std::to_string(rng());
}

// dlopens `path` and checks it is the module for `key`; nullptr if not.
void* open_checked(const std::string& path, const std::string& key) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return nullptr;
  auto fn = reinterpret_cast<const char* (*)()>(dlsym(h, "thunder_cache_key"));
  if (!fn || key != fn()) {
    dlclose(h);
    return nullptr;
  }
  return h;
}

}  // namespace

Module::~Module() {
  // Kernels may still be referenced by Python callables until exit; keep the object loaded.
}

void* Module::symbol(const std::string& name) const {
  void* p = dlsym(handle, name.c_str());
  if (!p) throw std::runtime_error("kernel module " + path + " has no symbol " + name);
  return p;
}

std::string cache_key(const std::string& source, const CompileOptions& o) {
  std::string flags;
  for (const std::string& f : o.flags) flags += f + " ";
  uint64_t h = fnv1a(source);
  h = fnv1a(compiler_version(o.compiler), h);
  h = fnv1a(o.compiler + " " + flags, h);
  h = fnv1a(cpu_features(), h);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::shared_ptr<Module> load_module(const std::string& source, const CompileOptions& o) {
  if (o.cache_dir.empty()) throw std::invalid_argument("load_module: cache_dir is required");
  make_dirs(o.cache_dir);
  auto m = std::make_shared<Module>();
  m->key = cache_key(source, o);
  m->path = o.cache_dir + "/" + m->key + ".so";
  if ((m->handle = open_checked(m->path, m->key))) {
    m->cache_hit = true;
    return m;
  }
  // Missing, truncated or foreign: build it anew beside the final path, then rename over it.
  std::string suffix = unique_suffix();
  std::string src = o.cache_dir + "/" + m->key + "." + suffix + ".cc";
  std::string tmp = o.cache_dir + "/" + m->key + "." + suffix + ".so";
  {
    std::ofstream out(src);
    out << source << "\nextern \"C\" const char* thunder_cache_key() { return \"" << m->key << "\"; }\n";
    if (!out) throw std::runtime_error("cannot write " + src);
  }
  std::string command = o.compiler, libs;
  for (const std::string& f : o.flags) (f.rfind("-l", 0) == 0 ? libs : command) += " " + f;
  command += " -o " + quote(tmp) + " " + quote(src) + libs;  // libraries after the source that needs them
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  std::string output = run_capture(command, &status);
  m->compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m->command = command;
  if (status != 0) {
    unlink(tmp.c_str());
    throw std::runtime_error("kernel compilation failed (kept " + src + "):\n" + command + "\n" + output);
  }
  unlink(src.c_str());
  if (rename(tmp.c_str(), m->path.c_str()) != 0) {
    unlink(tmp.c_str());
    throw std::runtime_error("cannot move the compiled kernel into " + m->path);
  }
  m->handle = open_checked(m->path, m->key);
  if (!m->handle) throw std::runtime_error("cannot load compiled kernel " + m->path + ": " + std::string(dlerror() ? dlerror() : "key mismatch"));
  return m;
}

}  // namespace thunder::runtime
