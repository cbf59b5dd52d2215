// The kernel cache and runtime: SHA-256 against known vectors, the entry format and its checks, directory
// and file safety rules, stale temporaries, eviction, the compiler subprocess's timeout, unloading.
#include <gtest/gtest.h>

#include <elf.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/compiler.h"
#include "runtime/kernel_cache.h"
#include "runtime/sha256.h"
#include "runtime/subprocess.h"

namespace rt = thunder::runtime;

namespace {

// A fresh directory under the test's temporary directory, removed (with its files) at the end.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    path = std::string(base && *base ? base : "/tmp") + "/thunder-cache-test-XXXXXX";
    if (!mkdtemp(path.data())) std::abort();
  }
  ~TempDir() {
    std::string cmd = "chmod -R u+rwx '" + path + "' 2>/dev/null; rm -rf '" + path + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", path.c_str());
  }
};

void write_file(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::binary) << text;
  chmod(path.c_str(), mode);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

mode_t mode_of(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  std::string cmd = "ls -A '" + dir + "'";
  FILE* p = popen(cmd.c_str(), "r");
  char line[4096];
  while (p && fgets(line, sizeof line, p)) {
    std::string s = line;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out.push_back(s);
  }
  if (p) pclose(p);
  return out;
}

// Tiny, quickly compiled kernels: a source that returns `n`.
rt::CompileOptions tiny_options(const std::string& dir) {
  rt::CompileOptions o;
  o.flags = {"-O0", "-fPIC", "-shared"};
  o.cache_dir = dir;
  return o;
}

std::string tiny_source(int n) { return "extern \"C\" int value() { return " + std::to_string(n) + "; }\n"; }

int call_value(const rt::Module& m) { return reinterpret_cast<int (*)()>(m.symbol("value"))(); }

// The pid of a process that has exited (and been reaped).
pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(rt::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(rt::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(rt::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(rt::sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(rt::sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalUpdatesMatchOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 7 + 3);
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000}) {
    for (size_t step : {1, 3, 64, 100}) {
      rt::Sha256 h;
      for (size_t i = 0; i < len; i += step) h.update(data.data() + i, std::min(step, len - i));
      const auto d = h.digest();
      EXPECT_EQ(rt::to_hex(d.data(), d.size()), rt::sha256_hex(data.substr(0, len))) << len << " by " << step;
    }
  }
}

TEST(KernelCache, AnEntryVerifiesAndAnyTruncationOrChangeDoesNot) {
  std::string payload;
  for (int i = 0; i < 5000; ++i) payload += static_cast<char>(i * 31);
  const std::string key = "0123456789abcdef0123456789abcdef";
  const std::string entry = payload + rt::entry_trailer(payload, key);
  EXPECT_TRUE(rt::verify_entry_bytes(entry, key));
  EXPECT_FALSE(rt::verify_entry_bytes(entry, "ffffffffffffffff0123456789abcdef"));
  for (size_t n = 0; n < entry.size(); n += 37) EXPECT_FALSE(rt::verify_entry_bytes(entry.substr(0, n), key)) << n;
  std::string altered = entry;
  altered[100] ^= 1;
  EXPECT_FALSE(rt::verify_entry_bytes(altered, key));
}

TEST(KernelCache, DirectoriesAreCreatedPrivateWhateverTheUmask) {
  TempDir t;
  const mode_t old = umask(0);
  rt::CacheDir d = rt::open_cache_dir(t.path + "/a/b/kernels");
  umask(old);
  EXPECT_EQ(d.warning, "");
  EXPECT_EQ(mode_of(t.path + "/a/b/kernels"), 0700u);
  EXPECT_EQ(mode_of(t.path + "/a"), 0700u);
}

TEST(KernelCache, AWorldWritableDirectoryIsRefusedForAPrivateOne) {
  TempDir t;
  const std::string shared = t.path + "/shared";
  mkdir(shared.c_str(), 0700);
  chmod(shared.c_str(), 0777);
  rt::CacheDir d = rt::open_cache_dir(shared);
  EXPECT_NE(d.warning.find("writable by group or others"), std::string::npos) << d.warning;
  EXPECT_NE(d.path, shared);
  EXPECT_EQ(mode_of(d.path), 0700u);
  // A planted entry there is never looked at: loading compiles into the private directory.
  rt::CompileOptions o = tiny_options(shared);
  const std::string key = rt::cache_key(tiny_source(1), o);
  write_file(shared + "/" + key + ".so", "planted", 0777);
  auto m = rt::load_module(tiny_source(1), o);
  EXPECT_FALSE(m->cache_hit);
  EXPECT_EQ(m->cache_dir, d.path);
  EXPECT_EQ(call_value(*m), 1);
  EXPECT_EQ(read_file(shared + "/" + key + ".so"), "planted");
}

TEST(KernelCache, ADirectoryOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  const passwd* nobody = getpwnam("nobody");
  if (!nobody) GTEST_SKIP() << "no user nobody";
  TempDir t;
  const std::string theirs = t.path + "/theirs";
  mkdir(theirs.c_str(), 0700);
  ASSERT_EQ(chown(theirs.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  rt::CacheDir d = rt::open_cache_dir(theirs);
  EXPECT_NE(d.warning.find("owned by uid"), std::string::npos) << d.warning;
  EXPECT_NE(d.path, theirs);
}

// The smallest payload open_entry accepts: an ELF header with no program headers.
std::string tiny_elf() {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  return std::string(reinterpret_cast<const char*>(&eh), sizeof eh);
}

TEST(KernelCache, AnEntryWhoseSegmentsRunPastItsEndIsAMiss) {
  // Its hash checks out, but dlopen would map a segment the file does not have: SIGBUS on first touch.
  TempDir t;
  rt::CacheDir d = rt::open_cache_dir(t.path + "/k");
  const std::string key = "00112233445566778899aabbccddeeff";
  std::string payload = tiny_elf();
  Elf64_Phdr ph{};
  ph.p_type = PT_LOAD;
  ph.p_offset = 0;
  ph.p_filesz = 1 << 20;
  Elf64_Ehdr eh;
  std::memcpy(&eh, payload.data(), sizeof eh);
  eh.e_phoff = sizeof eh;
  eh.e_phnum = 1;
  payload = std::string(reinterpret_cast<const char*>(&eh), sizeof eh) + std::string(reinterpret_cast<const char*>(&ph), sizeof ph);
  write_file(d.path + "/" + key + ".so", payload + rt::entry_trailer(payload, key), 0700);
  std::string why;
  EXPECT_FALSE(rt::open_entry(d, key, &why));
  EXPECT_EQ(why, "not a complete shared object");
}

TEST(KernelCache, EntriesThatAreNotRegularPrivateFilesAreMisses) {
  TempDir t;
  rt::CacheDir d = rt::open_cache_dir(t.path + "/k");
  const std::string key = "00112233445566778899aabbccddeeff", base = d.path + "/" + key;
  std::string payload = tiny_elf();
  std::string why;
  // A FIFO: the open must not block.
  ASSERT_EQ(mkfifo((base + ".so").c_str(), 0600), 0);
  EXPECT_FALSE(rt::open_entry(d, key, &why));
  EXPECT_EQ(why, "not a regular file");
  unlink((base + ".so").c_str());
  // A symbolic link to a valid entry.
  write_file(d.path + "/target", payload + rt::entry_trailer(payload, key), 0700);
  ASSERT_EQ(symlink((d.path + "/target").c_str(), (base + ".so").c_str()), 0);
  EXPECT_FALSE(rt::open_entry(d, key, &why));
  unlink((base + ".so").c_str());
  // Writable by others.
  write_file(base + ".so", payload + rt::entry_trailer(payload, key), 0702);
  EXPECT_FALSE(rt::open_entry(d, key, &why));
  EXPECT_EQ(why, "writable by group or others");
  chmod((base + ".so").c_str(), 0700);
  EXPECT_TRUE(rt::open_entry(d, key, &why)) << why;
  if (geteuid() == 0 && getpwnam("nobody")) {
    ASSERT_EQ(chown((base + ".so").c_str(), getpwnam("nobody")->pw_uid, 0), 0);
    EXPECT_FALSE(rt::open_entry(d, key, &why));
    EXPECT_NE(why.find("owned by uid"), std::string::npos);
  }
}

TEST(KernelCache, CompiledEntriesAreSealedPrivateAndHitLater) {
  TempDir t;
  const mode_t old = umask(0);
  rt::CompileOptions o = tiny_options(t.path + "/k");
  auto m = rt::load_module(tiny_source(7), o);
  umask(old);
  EXPECT_FALSE(m->cache_hit);
  EXPECT_EQ(call_value(*m), 7);
  EXPECT_EQ(mode_of(m->path), 0700u);
  EXPECT_EQ(m->path, o.cache_dir + "/" + m->key + ".so");
  EXPECT_EQ(m->key.size(), 32u);
  EXPECT_TRUE(rt::verify_entry_bytes(read_file(m->path), m->key));
  EXPECT_EQ(names_in(o.cache_dir), std::vector<std::string>{m->key + ".so"});  // no temporaries left
  auto again = rt::load_module(tiny_source(7), o);
  EXPECT_TRUE(again->cache_hit);
  EXPECT_EQ(call_value(*again), 7);
}

TEST(KernelCache, TruncatedEntriesAreRebuiltNotLoaded) {
  TempDir t;
  rt::CompileOptions o = tiny_options(t.path + "/k");
  const std::string path = rt::load_module(tiny_source(3), o)->path;
  const std::string good = read_file(path);
  ASSERT_GT(good.size(), 1000u);
  for (double fraction : {0.05, 0.3, 0.5, 0.75, 0.999}) {
    write_file(path, good.substr(0, static_cast<size_t>(good.size() * fraction)), 0700);
    auto m = rt::load_module(tiny_source(3), o);
    EXPECT_FALSE(m->cache_hit) << fraction;
    EXPECT_EQ(call_value(*m), 3);
    EXPECT_TRUE(rt::verify_entry_bytes(read_file(path), m->key));
  }
}

TEST(KernelCache, ModulesLoadedAtOnceKeepTheirOwnCode) {
  // Every module is loaded through /proc/self/fd/N; a number reused while an earlier module is loaded
  // must not hand back the earlier module.
  TempDir t;
  rt::CompileOptions o = tiny_options(t.path + "/k");
  std::vector<std::shared_ptr<rt::Module>> modules;
  for (int i = 0; i < 6; ++i) modules.push_back(rt::load_module(tiny_source(100 + i), o));
  for (int i = 0; i < 6; ++i) modules.push_back(rt::load_module(tiny_source(100 + i), o));  // hits
  for (int i = 0; i < 12; ++i) EXPECT_EQ(call_value(*modules[i]), 100 + i % 6) << i;
}

TEST(KernelCache, UnusedModulesAreUnloaded) {
  TempDir t;
  rt::CompileOptions o = tiny_options(t.path + "/k");
  auto m = rt::load_module(tiny_source(11), o);
  Dl_info info;
  void* fn = m->symbol("value");
  ASSERT_NE(dladdr(fn, &info), 0);
  std::weak_ptr<rt::Library> library = m->library;
  m.reset();
  EXPECT_TRUE(library.expired());
  EXPECT_EQ(dladdr(fn, &info), 0);  // nothing is mapped there any more
}

TEST(KernelCache, StaleTemporariesOfDeadProcessesAreRemoved) {
  TempDir t;
  rt::CacheDir d = rt::open_cache_dir(t.path + "/k");
  const std::string key = "00112233445566778899aabbccddeeff";
  const std::string dead = rt::temporary_name(key, "cc");
  const std::string dead_name = key + "." + std::to_string(dead_pid()) + dead.substr(dead.find('.', key.size() + 1));
  const std::string live = key + "." + std::to_string(getpid()) + ".456.so";
  const std::string old = key + "." + std::to_string(getpid()) + ".18446744073709551615.cc";  // 20 digits
  for (const std::string& n : {dead_name, live, old, std::string("unrelated.txt")}) write_file(d.path + "/" + n, "x");
  struct timeval two_days_ago[2] = {{time(nullptr) - 2 * 86400, 0}, {time(nullptr) - 2 * 86400, 0}};
  utimes((d.path + "/" + old).c_str(), two_days_ago);
  EXPECT_EQ(rt::remove_stale_temporaries(d), 2u);
  auto names = names_in(d.path);
  std::sort(names.begin(), names.end());
  std::vector<std::string> expected = {live, "unrelated.txt"};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
}

TEST(KernelCache, TemporariesOfAnotherPidNamespaceAreJudgedByAgeOnly) {
  // A cache shared by containers or hosts: a pid of another namespace says nothing about a process here.
  TempDir t;
  rt::CacheDir d = rt::open_cache_dir(t.path + "/k");
  const std::string key = "00112233445566778899aabbccddeeff";
  const std::string mine = rt::temporary_name(key, "cc");  // <key>.<pid>-<origin>.<random>.cc
  const size_t dash = mine.find('-'), dot = mine.find('.', dash);
  ASSERT_NE(dash, std::string::npos);
  const std::string origin = mine.substr(dash + 1, dot - dash - 1);
  const std::string dead_here = key + "." + std::to_string(dead_pid()) + "-" + origin + ".1.cc";
  const std::string dead_elsewhere = key + "." + std::to_string(dead_pid()) + "-0123456789abcdef.2.cc";
  for (const std::string& n : {dead_here, dead_elsewhere}) write_file(d.path + "/" + n, "x");
  EXPECT_EQ(rt::remove_stale_temporaries(d), 1u);
  EXPECT_EQ(names_in(d.path), std::vector<std::string>{dead_elsewhere});
}

TEST(KernelCache, EvictionRemovesLeastRecentlyUsedEntriesFirst) {
  TempDir t;
  rt::CacheDir d = rt::open_cache_dir(t.path + "/k");
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back(std::string(31, 'a') + static_cast<char>('0' + i));
    const std::string path = d.path + "/" + keys.back() + ".so";
    write_file(path, std::string(1000, 'x'), 0700);
    struct timeval when[2] = {{1000000 + i * 10, 0}, {1000000 + i * 10, 0}};  // entry i used at time i
    utimes(path.c_str(), when);
  }
  write_file(d.path + "/notes.txt", std::string(5000, 'y'));
  EXPECT_EQ(rt::cache_bytes(d), 5000u);
  EXPECT_EQ(rt::evict_entries(d, 2500, keys[0]), 3u);  // keeps keys[0] (just written) and the newest, keys[4]
  auto names = names_in(d.path);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{keys[0] + ".so", keys[4] + ".so", "notes.txt"}));
  auto cleared = rt::clear_cache(d.path);
  EXPECT_EQ(cleared.files, 2u);
  EXPECT_EQ(names_in(d.path), std::vector<std::string>{"notes.txt"});
}

TEST(KernelCache, ALoadedModuleSurvivesClearingTheCache) {
  TempDir t;
  rt::CompileOptions o = tiny_options(t.path + "/k");
  auto m = rt::load_module(tiny_source(5), o);
  rt::clear_cache(o.cache_dir);
  EXPECT_EQ(call_value(*m), 5);
  EXPECT_FALSE(rt::load_module(tiny_source(5), o)->cache_hit);
}

TEST(Subprocess, OutputAndStatusAreCaptured) {
  rt::ProcessResult r = rt::run_process({"sh", "-c", "echo out; echo err >&2; exit 3"}, 10);
  EXPECT_EQ(r.status, 3);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.output, "out\nerr\n");
  EXPECT_EQ(rt::run_process({"no-such-program-thunder"}, 10).status, -1);
}

TEST(Subprocess, ATimeoutKillsTheWholeProcessGroup) {
  TempDir t;
  const std::string marker = t.path + "/late";
  const auto start = std::chrono::steady_clock::now();
  // A child of the program outlives it unless the group is killed: it would write the marker after 2 s.
  rt::ProcessResult r = rt::run_process({"sh", "-c", "(sleep 2; touch '" + marker + "') & sleep 30"}, 0.5);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(seconds, 5);
  sleep(3);
  EXPECT_NE(access(marker.c_str(), F_OK), 0);
}

TEST(Subprocess, ACompilerThatHangsFailsTheLoadWithAnError) {
  TempDir t;
  rt::CompileOptions o = tiny_options(t.path + "/k");
  o.compiler = t.path + "/slow-compiler";
  write_file(o.compiler, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo slow 1; exit 0; fi\nsleep 30\n", 0700);
  o.timeout_seconds = 0.5;
  try {
    rt::load_module(tiny_source(1), o);
    FAIL() << "expected a timeout";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(names_in(o.cache_dir).empty());
}

TEST(Subprocess, ACompilerNotFoundIsNamedWithWhatToDo) {
  TempDir t;
  rt::CompileOptions o = tiny_options(t.path + "/k");
  o.compiler = "thunder-no-such-compiler";
  try {
    rt::load_module(tiny_source(1), o);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot run thunder-no-such-compiler: not found in PATH"), std::string::npos) << what;
    EXPECT_NE(what.find("need a C++ compiler"), std::string::npos) << what;
    EXPECT_EQ(what.find("status"), std::string::npos) << what;
  }
}
