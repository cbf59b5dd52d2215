#include "runtime/kernel_cache.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <system_error>
#include <tuple>

#include "runtime/sha256.h"

namespace thunder::runtime {
namespace {

constexpr char kMagic[8] = {'T', 'H', 'K', 'E', 'N', 'T', 'R', '1'};
constexpr size_t kTrailer = 64;  // magic (8), key (16, its first 16 characters), payload length (8), SHA-256 (32)
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;

[[noreturn]] void fail(const std::string& what, int err = errno) {
  throw std::system_error(err, std::generic_category(), what + " (errno " + std::to_string(err) + ")");
}

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

bool is_hex(const std::string& s, size_t begin, size_t end) {
  if (begin >= end) return false;
  for (size_t i = begin; i < end; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(s[i])) || std::isupper(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

bool is_digits(const std::string& s, size_t begin, size_t end) {
  if (begin >= end || end - begin > 20) return false;  // a 64-bit number has up to 20 digits
  for (size_t i = begin; i < end; ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// <hex key>.so (a CPU kernel module) or <hex key>.cuda (a GPU module: CUBIN, PTX and NVRTC's log)
bool is_entry_name(const std::string& name) {
  for (const char* ext : {kSharedObject, kCudaModule}) {
    const size_t n = std::strlen(ext);
    if (name.size() > n && name.compare(name.size() - n, n, ext) == 0 && name.size() - n >= 16 &&
        name.size() - n <= 64 && is_hex(name, 0, name.size() - n))
      return true;
  }
  return false;
}

// Where this process's pids mean something: 16 hex digits of a hash of the boot id and the pid namespace, so
// that a cache shared by containers or hosts never judges another namespace's pid ("" if unknown).
const std::string& process_origin() {
  static const std::string origin = [] {
    std::string boot;
    if (Fd fd{open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC)}) {
      char buf[64];
      const ssize_t n = read(fd.get(), buf, sizeof buf);
      if (n > 0) boot.assign(buf, static_cast<size_t>(n));
    }
    struct stat st;
    if (boot.empty() || stat("/proc/self/ns/pid", &st) != 0) return std::string();
    Sha256 h;
    h.update(boot + ":" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino));
    const auto d = h.digest();
    return to_hex(d.data(), 8);
  }();
  return origin;
}

struct TemporaryName {
  long pid = 0;        // 0: not a temporary
  std::string origin;  // "" in names without one
};

// <hex key>.<pid>[-<origin>].<random>.<ext>
TemporaryName parse_temporary(const std::string& name) {
  const size_t a = name.find('.');
  if (a == std::string::npos || a < 16 || a > 64 || !is_hex(name, 0, a)) return {};
  const size_t b = name.find('.', a + 1);
  if (b == std::string::npos) return {};
  const size_t dash = name.find('-', a + 1);
  const size_t pid_end = dash < b ? dash : b;
  if (!is_digits(name, a + 1, pid_end) || (dash < b && (b - dash - 1 != 16 || !is_hex(name, dash + 1, b)))) return {};
  const size_t c = name.find('.', b + 1);
  if (c == std::string::npos || !is_digits(name, b + 1, c) || c + 1 >= name.size()) return {};
  return {std::strtol(name.c_str() + a + 1, nullptr, 10), dash < b ? name.substr(dash + 1, 16) : std::string()};
}

// Whether the process that made a temporary is known to have ended: its pid is of this boot and pid namespace
// (or the name predates origins) and no process has it.
bool process_is_gone(const TemporaryName& t) {
  if (!t.origin.empty() && t.origin != process_origin()) return false;  // another namespace's: age decides
  return t.pid > 0 && kill(static_cast<pid_t>(t.pid), 0) != 0 && errno == ESRCH;
}

// Whether `payload` is an ELF file whose program headers and loaded segments lie inside it (dlopen maps them:
// a segment past the end would fault on first touch, SIGBUS, not fail).
bool elf_fits(const char* data, uint64_t size) {
  Elf64_Ehdr eh;
  if (size < sizeof eh) return false;
  std::memcpy(&eh, data, sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return false;
  if (eh.e_phentsize != sizeof(Elf64_Phdr)) return false;
  if (eh.e_phoff > size || uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr) > size - eh.e_phoff) return false;
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, data + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_type == PT_LOAD && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)) return false;
  }
  return true;
}

// The names in the directory `dir_fd` (read through a duplicate, so dir_fd stays open and positioned).
std::vector<std::string> list_names(int dir_fd) {
  std::vector<std::string> names;
  const int dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return names;
  DIR* d = fdopendir(dup_fd);
  if (!d) {
    close(dup_fd);
    return names;
  }
  rewinddir(d);
  while (const dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  closedir(d);
  return names;
}

// Reads `size` bytes from the start of `fd`.
bool read_all(int fd, uint64_t size, std::string* out) {
  out->resize(size);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, out->data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<uint64_t>(n);
  }
  return true;
}

// Why a file with this status is not trusted as ours ("" if it is): a regular file owned by this user that
// neither group nor others can write.
std::string untrusted_file(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != geteuid())
    return "owned by uid " + std::to_string(st.st_uid) + ", not this user (uid " + std::to_string(geteuid()) + ")";
  if (st.st_mode & 022) return "writable by group or others";
  return "";
}

std::string untrusted_dir(const struct stat& st) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (st.st_uid != geteuid())
    return "owned by uid " + std::to_string(st.st_uid) + ", not this user (uid " + std::to_string(geteuid()) + ")";
  if (st.st_mode & 022) return std::string("writable by group or others (mode ") + mode + ")";
  return "";
}

// Opens `path` as a directory this user owns and only this user can write; on failure says why.
Fd open_trusted_dir(const std::string& path, std::string* why) {
  Fd fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    *why = "cannot open it: " + errno_text(errno);
    return Fd();
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    *why = "cannot stat it: " + errno_text(errno);
    return Fd();
  }
  if (std::string bad = untrusted_dir(st); !bad.empty()) {
    *why = bad;
    return Fd();
  }
  if (faccessat(fd.get(), ".", W_OK | X_OK, AT_EACCESS) != 0) {
    *why = "cannot write to it: " + errno_text(errno);
    return Fd();
  }
  return fd;
}

// Creates `path` and its missing parents with mode 0700 (whatever the umask: mkdir's mode only loses bits).
void make_private_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (mkdir(prefix.c_str(), 0700) != 0) continue;
    // Under a umask of 0700 and more the new directory lacks even our bits: set them through a descriptor of
    // it (a chmod by path would follow a symlink someone put in its place to any file of ours).
    Fd fd(open(prefix.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd) fchmod(fd.get(), 0700);
  }
}

// The process's registries: which directories were swept, which fallbacks exist (removed at exit).
struct Registry {
  std::mutex mu;
  std::set<std::pair<dev_t, ino_t>> swept;
  std::map<std::string, std::string> fallbacks;  // requested path -> private directory
  pid_t owner = getpid();                        // a forked child that exits leaves the parent's directories
  ~Registry() {
    if (getpid() != owner) return;
    for (const auto& [requested, dir] : fallbacks) {
      Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
      if (!fd) continue;
      for (const std::string& name : list_names(fd.get())) unlinkat(fd.get(), name.c_str(), 0);
      rmdir(dir.c_str());
    }
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

void sweep_once(const CacheDir& dir) {
  struct stat st;
  if (fstat(dir.fd.get(), &st) != 0) return;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    if (!registry().swept.insert({st.st_dev, st.st_ino}).second) return;
  }
  remove_stale_temporaries(dir);
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

// Private directories are named thunder-kernels-<pid>-<origin>-XXXXXX, so that a later process can tell that the
// one which made a directory has ended without removing it (killed by a signal, or os._exit: no destructor ran).
constexpr const char* kPrivatePrefix = "thunder-kernels-";

// Removes, under `base`, the private directories of this user's ended processes (of this boot and pid namespace):
// their regular files and links (never followed), then the directory; anything else keeps it.
void remove_ended_processes_dirs(const std::string& base) {
  Fd base_fd(open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!base_fd) return;
  const size_t a = std::strlen(kPrivatePrefix);
  for (const std::string& name : list_names(base_fd.get())) {
    const size_t b = name.find('-', a);
    if (name.rfind(kPrivatePrefix, 0) != 0 || b == std::string::npos || !is_digits(name, a, b) ||
        name.size() < b + 18 || name[b + 17] != '-' || !is_hex(name, b + 1, b + 17))
      continue;
    const TemporaryName made{std::strtol(name.c_str() + a, nullptr, 10), name.substr(b + 1, 16)};
    if (!process_is_gone(made)) continue;
    Fd dir(openat(base_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!dir || fstat(dir.get(), &st) != 0 || st.st_uid != geteuid()) continue;
    for (const std::string& entry : list_names(dir.get())) {
      struct stat es;
      const bool file = fstatat(dir.get(), entry.c_str(), &es, AT_SYMLINK_NOFOLLOW) == 0;
      if (file && (S_ISREG(es.st_mode) || S_ISLNK(es.st_mode))) unlinkat(dir.get(), entry.c_str(), 0);
    }
    unlinkat(base_fd.get(), name.c_str(), AT_REMOVEDIR);
  }
}

CacheDir fallback_cache_dir(const std::string& path, const std::string& why) {
  CacheDir dir;
  dir.requested = path;
  dir.warning = "thunder: not using the kernel cache directory " + path + ": " + why;
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().fallbacks.find(path);
  if (it == registry().fallbacks.end()) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = tmp && *tmp ? tmp : "/tmp", &origin = process_origin();
    if (!origin.empty()) remove_ended_processes_dirs(base);
    std::string pattern = base + "/" + kPrivatePrefix +
                          (origin.empty() ? "" : std::to_string(getpid()) + "-" + origin + "-") + "XXXXXX";
    if (!mkdtemp(pattern.data())) fail("cannot create a private kernel directory " + pattern);
    it = registry().fallbacks.emplace(path, pattern).first;
  }
  dir.path = it->second;
  dir.warning += "; using the private directory " + dir.path + " for this process instead";
  std::string bad;
  dir.fd = open_trusted_dir(dir.path, &bad);
  if (!dir.fd) throw std::runtime_error("thunder: the private kernel directory " + dir.path + " is unusable: " + bad);
  return dir;
}

CacheDir open_cache_dir(const std::string& path) {
  if (path.empty()) throw std::invalid_argument("the kernel cache directory is empty");
  make_private_dirs(path);
  CacheDir dir;
  std::string why;
  dir.fd = open_trusted_dir(path, &why);
  if (!dir.fd) return fallback_cache_dir(path, why);
  dir.requested = dir.path = path;
  sweep_once(dir);
  return dir;
}

std::string entry_trailer(const std::string& payload, const std::string& key) {
  std::string t(kTrailer, '\0');
  std::memcpy(t.data(), kMagic, 8);
  std::memcpy(t.data() + 8, key.data(), std::min<size_t>(16, key.size()));
  const uint64_t n = payload.size();
  for (int i = 0; i < 8; ++i) t[16 + 8 + i] = static_cast<char>(n >> (8 * i));
  Sha256 h;
  h.update(payload);
  h.update(key);
  const auto d = h.digest();
  std::memcpy(t.data() + 32, d.data(), d.size());
  return t;
}

bool verify_entry_bytes(const std::string& bytes, const std::string& key, std::string* why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  if (bytes.size() < kTrailer) return no("truncated (shorter than its trailer)");
  const std::string payload = bytes.substr(0, bytes.size() - kTrailer);
  if (std::memcmp(bytes.data() + payload.size(), kMagic, 8) != 0) return no("no trailer (truncated, or not an entry)");
  if (bytes.compare(bytes.size() - kTrailer, kTrailer, entry_trailer(payload, key)) != 0)
    return no("its contents do not match its SHA-256 (truncated or altered)");
  return true;
}

Fd open_entry(const CacheDir& dir, const std::string& key, std::string* miss, const std::string& ext) {
  auto no = [&](const std::string& reason) {
    if (miss) *miss = reason;
    return Fd();
  };
  const std::string name = key + ext;
  // O_NONBLOCK: a FIFO planted at the name must not block the open.
  Fd fd(openat(dir.fd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return no(errno == ENOENT ? "absent" : "cannot open: " + errno_text(errno));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return no("cannot stat: " + errno_text(errno));
  if (std::string bad = untrusted_file(st); !bad.empty()) return no(bad);
  if (static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) return no("larger than any entry");
  std::string bytes, why;
  if (!read_all(fd.get(), static_cast<uint64_t>(st.st_size), &bytes)) return no("cannot read: " + errno_text(errno));
  if (!verify_entry_bytes(bytes, key, &why)) return no(why);
  if (ext == kSharedObject && !elf_fits(bytes.data(), bytes.size() - kTrailer)) return no("not a complete shared object");
  futimens(fd.get(), nullptr);  // recently used: evicted last
  return fd;
}

Fd commit_entry(const CacheDir& dir, const std::string& key, const std::string& tmp_name, const std::string& ext) {
  Fd fd(openat(dir.fd.get(), tmp_name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) fail("cannot open the compiled kernel " + dir.path + "/" + tmp_name);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) fail("cannot stat " + tmp_name);
  if (std::string bad = untrusted_file(st); !bad.empty() && S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
    // Only the mode is off (the compiler honours the umask): fixed below.
  } else if (!bad.empty()) {
    throw std::runtime_error("the compiled kernel " + tmp_name + " is " + bad);
  }
  std::string payload;
  if (!read_all(fd.get(), static_cast<uint64_t>(st.st_size), &payload)) fail("cannot read " + tmp_name);
  const std::string trailer = entry_trailer(payload, key);
  for (size_t done = 0; done < trailer.size();) {
    const ssize_t n = pwrite(fd.get(), trailer.data() + done, trailer.size() - done, static_cast<off_t>(payload.size() + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write " + dir.path + "/" + tmp_name, n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd.get(), 0700) != 0) fail("cannot set the mode of " + tmp_name);
  if (fsync(fd.get()) != 0) fail("cannot write " + dir.path + "/" + tmp_name + " to disk");
  const std::string name = key + ext;
  if (renameat(dir.fd.get(), tmp_name.c_str(), dir.fd.get(), name.c_str()) != 0) {
    const int err = errno;
    if (err != EISDIR && err != ENOTEMPTY && err != EEXIST) fail("cannot move the compiled kernel into " + dir.path + "/" + name, err);
    // A directory sits at the entry's name: removed if empty; else this process uses its kernel uncached.
    if (unlinkat(dir.fd.get(), name.c_str(), AT_REMOVEDIR) != 0 ||
        renameat(dir.fd.get(), tmp_name.c_str(), dir.fd.get(), name.c_str()) != 0) {
      unlinkat(dir.fd.get(), tmp_name.c_str(), 0);
      return fd;
    }
  }
  fsync(dir.fd.get());  // the rename itself is durable (some file systems refuse: not an error)
  return fd;
}

std::string temporary_name(const std::string& key, const std::string& ext) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  uint64_t r;
  {
    std::lock_guard<std::mutex> lock(mu);
    r = rng();
  }
  const std::string& origin = process_origin();
  return key + "." + std::to_string(getpid()) + (origin.empty() ? "" : "-" + origin) + "." + std::to_string(r) + "." + ext;
}

size_t remove_stale_temporaries(const CacheDir& dir, double max_age_seconds) {
  size_t removed = 0;
  const time_t now = std::time(nullptr);
  for (const std::string& name : list_names(dir.fd.get())) {
    const TemporaryName t = parse_temporary(name);
    if (t.pid == 0) continue;
    struct stat st;
    if (fstatat(dir.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    const bool old = static_cast<double>(now - st.st_mtime) > max_age_seconds;
    if ((old || process_is_gone(t)) && unlinkat(dir.fd.get(), name.c_str(), 0) == 0) ++removed;
  }
  return removed;
}

namespace {

struct EntryInfo {
  struct timespec mtime;
  uint64_t bytes;
  std::string name;
};

std::vector<EntryInfo> list_entries(const CacheDir& dir) {
  std::vector<EntryInfo> out;
  for (const std::string& name : list_names(dir.fd.get())) {
    if (!is_entry_name(name)) continue;
    struct stat st;
    if (fstatat(dir.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    out.push_back({st.st_mtim, static_cast<uint64_t>(st.st_size), name});
  }
  return out;
}

}  // namespace

uint64_t cache_bytes(const CacheDir& dir) {
  uint64_t total = 0;
  for (const EntryInfo& e : list_entries(dir)) total += e.bytes;
  return total;
}

size_t evict_entries(const CacheDir& dir, uint64_t max_bytes, const std::string& keep_key) {
  std::vector<EntryInfo> entries = list_entries(dir);
  uint64_t total = 0;
  for (const EntryInfo& e : entries) total += e.bytes;
  if (total <= max_bytes) return 0;
  std::sort(entries.begin(), entries.end(), [](const EntryInfo& a, const EntryInfo& b) {
    return std::tie(a.mtime.tv_sec, a.mtime.tv_nsec, a.name) < std::tie(b.mtime.tv_sec, b.mtime.tv_nsec, b.name);
  });
  size_t removed = 0;
  for (const EntryInfo& e : entries) {
    if (total <= max_bytes) break;
    if (!keep_key.empty() && e.name.rfind(keep_key + ".", 0) == 0) continue;
    if (unlinkat(dir.fd.get(), e.name.c_str(), 0) == 0) {
      total -= e.bytes;
      ++removed;
    }
  }
  return removed;
}

ClearResult clear_cache(const std::string& path) {
  ClearResult result;
  auto clear_dir = [&](const std::string& p) {
    std::string why;
    CacheDir dir;
    dir.path = dir.requested = p;
    dir.fd = open_trusted_dir(p, &why);
    if (!dir.fd) {
      if (errno == ENOENT && why.rfind("cannot open", 0) == 0) return;
      throw std::runtime_error("thunder: not clearing the kernel cache " + p + ": " + why);
    }
    for (const EntryInfo& e : list_entries(dir)) {
      if (unlinkat(dir.fd.get(), e.name.c_str(), 0) == 0) {
        ++result.files;
        result.bytes += e.bytes;
      }
    }
    result.files += remove_stale_temporaries(dir);
  };
  struct stat st;
  if (stat(path.c_str(), &st) == 0) clear_dir(path);
  std::string fallback;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().fallbacks.find(path);
    if (it != registry().fallbacks.end()) fallback = it->second;
  }
  if (!fallback.empty()) clear_dir(fallback);
  return result;
}

uint64_t default_max_cache_bytes() {
  const char* v = std::getenv("THUNDER_CACHE_MAX_BYTES");
  if (!v || !*v) return uint64_t{2} << 30;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (!std::isdigit(static_cast<unsigned char>(*v)) || errno != 0 || *end != '\0')
    throw std::invalid_argument(std::string("THUNDER_CACHE_MAX_BYTES must be a whole number of bytes, got '") + v + "'");
  return n;
}

void write_new_file(const CacheDir& dir, const std::string& name, const std::string& bytes) {
  Fd fd(openat(dir.fd.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  auto fail = [&](int err) {
    unlinkat(dir.fd.get(), name.c_str(), 0);
    throw std::system_error(err, std::generic_category(),
                            "cannot write " + dir.path + "/" + name + " (errno " + std::to_string(err) + ")");
  };
  if (!fd) fail(errno);
  if (fchmod(fd.get(), 0600) != 0) fail(errno);
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (close(fd.release()) != 0) fail(errno);
}

bool read_whole_file(int fd, std::string* out) {
  struct stat st;
  return fstat(fd, &st) == 0 && read_all(fd, static_cast<uint64_t>(st.st_size), out);
}

}  // namespace thunder::runtime
