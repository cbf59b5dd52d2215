#include "runtime/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace thunder::runtime {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// The executable for argv[0]: as given if it has a '/', else the first match in PATH ("" if none).
std::string resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return "";
}

void kill_group(int) { kill(0, SIGKILL); }

// fork(2) itself, without glibc's fork(): that one runs the pthread_atfork handlers libraries registered, and
// OpenBLAS's (loaded by torch or scipy) waits for its worker threads, which deadlocked a compile started from a
// worker thread while another thread used BLAS. The child runs async-signal-safe calls only, before exec, so
// it needs none of what the handlers prepare.
pid_t fork_without_handlers() {
#ifdef SYS_fork
  return static_cast<pid_t>(syscall(SYS_fork));
#else
  return static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
#endif
}

// In the forked child (async-signal-safe calls only: the parent may have other threads). Becomes the
// leader of a new process group, arranges to kill that group if the parent thread dies, then runs the
// program in a grandchild and exits with its status.
[[noreturn]] void supervise(const char* path, char* const* argv, int out_fd, pid_t parent, int cwd_fd) {
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // the caller's thread may block signals; the program must not
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = kill_group;
  sigaction(SIGTERM, &sa, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) kill(0, SIGKILL);  // the parent died before the line above
  if (cwd_fd >= 0 && fchdir(cwd_fd) != 0) _exit(126);
  const pid_t child = fork_without_handlers();
  if (child < 0) _exit(126);
  if (child == 0) {
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGTERM, &dfl, nullptr);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    execv(path, argv);
    _exit(127);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) _exit(126);
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

}  // namespace

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    bool plain = !a.empty();
    for (char c : a) plain = plain && (isalnum(static_cast<unsigned char>(c)) || std::strchr("-_=./,+:@%", c));
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += (out.empty() ? "" : " ") + (plain ? a : quoted + "'");
  }
  return out;
}

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds, int cwd_fd) {
  if (!(timeout_seconds < 365.0 * 86400)) timeout_seconds = 0;  // a year, inf: no limit (NaN too)
  ProcessResult result;
  if (argv.empty()) throw std::invalid_argument("run_process: empty argv");
  const std::string path = resolve(argv[0]);
  if (path.empty()) {
    result.output = "cannot run " + argv[0] + ": not found in PATH";
    return result;
  }
  std::vector<char*> args;  // prepared before fork: the child may not allocate
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(errno_text("cannot create a pipe for the compiler"));
  const pid_t parent = getpid();
  const pid_t pid = fork_without_handlers();
  if (pid < 0) {
    const int saved = errno;
    close(fds[0]);
    close(fds[1]);
    errno = saved;
    throw std::runtime_error(errno_text("cannot start " + argv[0]));
  }
  if (pid == 0) supervise(path.c_str(), args.data(), fds[1], parent, cwd_fd);
  setpgid(pid, pid);  // also done by the child; whichever runs first
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  char buf[4096];
  for (;;) {
    int wait_ms = -1;
    if (timeout_seconds > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        result.timed_out = true;
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        break;
      }
      wait_ms = static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30));
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    const int r = poll(&p, 1, wait_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (r == 0) continue;  // the deadline check above fires
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer (the program and its children) has exited
    result.output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) break;
  if (result.timed_out) kill(-pid, SIGKILL);  // anything of the group that outlived the supervisor
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (result.status == 127 && result.output.empty()) result.output = "cannot execute " + path;
  return result;
}

}  // namespace thunder::runtime
