// Test helpers for `tandem serve`: the real binary started as a child process on a free port (--port 0, read back
// from its "listening on" line), an HTTP client for it, server-sent events split into their JSON, and `tandem run`
// as the reference. Waits have generous limits so that a hung server fails the test instead of hanging it; no
// test asserts how long anything takes.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/testutil.h"

namespace tandem::test {

inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q.push_back(c);
    }
  }
  return q + "'";
}

class ServeProcess {
 public:
  // Starts `tandem serve ARGS --port 0` and waits until /health answers 200 (unless not `wait_ready`). Check ok()
  // (failures are recorded). `env`: NAME=VALUE settings for the server only.
  explicit ServeProcess(const std::vector<std::string>& args, bool wait_ready = true,
                        const std::vector<std::string>& env = {}) {
    err_path_ = (std::filesystem::temp_directory_path() /
                 ("tandem-serve-" + std::to_string(getpid()) + "-" + std::to_string(counter_++) + ".err"))
                    .string();
    int out[2];
    if (pipe(out) != 0) {
      ADD_FAILURE() << "pipe failed";
      return;
    }
    std::vector<std::string> argv_s = {TandemBin(), "serve"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    argv_s.insert(argv_s.end(), {"--port", "0"});
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The environment is built before fork: the child of a threaded process only calls exec.
    std::vector<std::string> env_s = env;
    // The settings go first: getenv takes the first entry of a name.
    std::vector<char*> envp;
    for (std::string& e : env_s) envp.push_back(e.data());
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, STDERR_FILENO);
      close(out[0]);
      close(out[1]);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(out[1]);
    out_fd_ = out[0];
    const std::string line = ReadLine(std::chrono::seconds(120));
    const std::string prefix = "listening on http://127.0.0.1:";
    if (line.rfind(prefix, 0) != 0) {
      ADD_FAILURE() << "no 'listening on' line, got '" << line << "'; stderr: " << Stderr();
      return;
    }
    port_ = std::atoi(line.c_str() + prefix.size());
    if (wait_ready && !WaitReady()) ADD_FAILURE() << "the server never became ready; stderr: " << Stderr();
  }

  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    std::filesystem::remove(err_path_);
  }

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string Stderr() const { return ReadFile(err_path_); }

  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_connection_timeout(30);
    c->set_read_timeout(300);
    c->set_write_timeout(30);
    return c;
  }

  bool WaitReady() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    auto c = Client();
    while (std::chrono::steady_clock::now() < until) {
      if (httplib::Result r = c->Get("/health"); r && r->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Sends `sig` and returns the raw waitpid status (-1 when the server did not exit).
  int StopWith(int sig) {
    kill(pid_, sig);
    return WaitExit();
  }
  int WaitExit() {
    if (exited_) return exit_status_;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        exit_status_ = status;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  std::string ReadLine(std::chrono::seconds limit) {
    std::string line;
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{.fd = out_fd_, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      if (read(out_fd_, &c, 1) != 1) break;  // the server exited
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

  static inline int counter_ = 0;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  bool exited_ = false;
  int exit_status_ = -1;
  std::string err_path_;
};

// POSTs JSON; the body parsed (null when it is not JSON), with the status.
struct JsonReply {
  int status = 0;
  nlohmann::json body;
  std::string raw;
};
inline JsonReply PostJson(httplib::Client& c, const std::string& path, const std::string& body,
                          const httplib::Headers& headers = {}) {
  JsonReply r;
  httplib::Result res = c.Post(path, headers, body, "application/json");
  if (!res) {
    ADD_FAILURE() << "POST " << path << " failed: " << httplib::to_string(res.error());
    return r;
  }
  r.status = res->status;
  r.raw = res->body;
  r.body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  return r;
}
inline JsonReply PostJson(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                          const httplib::Headers& headers = {}) {
  return PostJson(c, path, body.dump(), headers);
}

// The events of a server-sent-event stream: each "data: X" payload, in order ("[DONE]" as it is).
inline std::vector<std::string> SseData(const std::string& stream) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < stream.size()) {
    size_t end = stream.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "an event does not end with a blank line: '" << stream.substr(pos) << "'";
      break;
    }
    const std::string event = stream.substr(pos, end - pos);
    if (event.rfind("data: ", 0) != 0) {
      ADD_FAILURE() << "an event is not 'data: ...': '" << event << "'";
    } else {
      out.push_back(event.substr(6));
    }
    pos = end + 2;
  }
  return out;
}

// `tandem run --temp 0 --json` on the same model and prompt: the reference the server is held to.
struct RunReference {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;
  std::string text;
};
inline RunReference RunGreedy(const std::string& model, const std::string& prompt, int n,
                              const std::string& extra = "--temp 0") {
  const CmdResult r = RunCommand(TandemBin() + " run -m " + ShellQuote(model) + " -p " + ShellQuote(prompt) +
                                 " -n " + std::to_string(n) + " -t 1 --no-escape --json " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  RunReference ref;
  if (r.exit_code != 0) return ref;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ref.prompt_tokens = j["prompt_tokens"].get<std::vector<int32_t>>();
  ref.tokens = j["tokens"].get<std::vector<int32_t>>();
  ref.text = j["text"].get<std::string>();
  return ref;
}

// Checks the OpenAI error shape: {"error": {"message": string, "type": string, "param", "code"}}.
inline void ExpectErrorShape(const JsonReply& r) {
  ASSERT_TRUE(r.body.is_object()) << r.raw;
  ASSERT_TRUE(r.body.contains("error")) << r.raw;
  const nlohmann::json& e = r.body["error"];
  EXPECT_TRUE(e["message"].is_string()) << r.raw;
  EXPECT_FALSE(e["message"].get<std::string>().empty()) << r.raw;
  EXPECT_TRUE(e["type"].is_string()) << r.raw;
  EXPECT_TRUE(e.contains("param")) << r.raw;
  EXPECT_TRUE(e.contains("code")) << r.raw;
}

}  // namespace tandem::test
