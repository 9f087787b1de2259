// `tandem chat` as a user drives it: the real binary with its stdin and stdout on pipes. The reference for each
// answer is `tandem run` on the conversation written out by hand in ChatML (the format is public, so the test
// does not ask our template engine for it), greedy; Ctrl-C is a real SIGINT.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/serve_process.h"

namespace tandem {
namespace {

std::string Model() { return test::ModelPath("stories260K.gguf"); }

// `tandem chat ARGS` with pipes for stdin and stdout; stderr goes to a file. Waits have generous limits so that a
// hung chat fails the test instead of hanging it.
class ChatProcess {
 public:
  explicit ChatProcess(const std::vector<std::string>& args) {
    err_path_ = (std::filesystem::temp_directory_path() /
                 ("tandem-chat-" + std::to_string(getpid()) + "-" + std::to_string(counter_++) + ".err"))
                    .string();
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) {
      ADD_FAILURE() << "pipe failed";
      return;
    }
    std::vector<std::string> argv_s = {test::TandemBin(), "chat"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, STDERR_FILENO);
      for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    in_fd_ = in[1];
    out_fd_ = out[0];
  }
  ~ChatProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    CloseStdin();
    if (out_fd_ >= 0) close(out_fd_);
    std::filesystem::remove(err_path_);
  }

  void Write(const std::string& s) { ASSERT_EQ(write(in_fd_, s.data(), s.size()), static_cast<ssize_t>(s.size())); }
  void CloseStdin() {
    if (in_fd_ >= 0) close(in_fd_);
    in_fd_ = -1;
  }
  // Reads stdout until it holds at least `n` bytes (or the chat closes it, or two minutes pass).
  const std::string& ReadAtLeast(size_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (out_.size() < n && std::chrono::steady_clock::now() < until) {
      pollfd p{.fd = out_fd_, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t got = read(out_fd_, buf, sizeof buf);
      if (got <= 0) break;
      out_.append(buf, static_cast<size_t>(got));
    }
    return out_;
  }
  // Waits until stderr holds `text`; false after two minutes.
  bool WaitStderr(const std::string& text) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < until) {
      if (Stderr().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // The rest of stdout and the exit code (-1 when it did not exit in two minutes or died of a signal).
  int Finish() {
    ReadAtLeast(SIZE_MAX);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  void Interrupt() { kill(pid_, SIGINT); }
  const std::string& out() const { return out_; }
  std::string Stderr() const { return test::ReadFile(err_path_); }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1;
  bool exited_ = false;
  std::string out_;
  std::string err_path_;
};

std::string ChatmlTurn(const std::string& role, const std::string& content) {
  return "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
}

// "prompt: N tokens" of the report.
int64_t PromptTokensReported(const std::string& err) {
  const size_t at = err.find("\nprompt: ");
  return at == std::string::npos ? -1 : std::stoll(err.substr(at + 9));
}

TEST(Chat, EachAnswerIsRunsGreedyTextForTheConversationSoFar) {
  const int n = 24;
  ChatProcess chat({"-m", Model(), "--chat-template", "chatml", "-sys", "You tell stories.", "--temp", "0", "-n",
                    std::to_string(n), "-t", "1", "-c", "512"});
  chat.Write("Hello there\nTell me about a cat\n/exit\n");
  ASSERT_EQ(chat.Finish(), 0) << chat.Stderr();

  std::string convo = ChatmlTurn("system", "You tell stories.") + ChatmlTurn("user", "Hello there");
  const test::RunReference first = test::RunGreedy(Model(), convo + "<|im_start|>assistant\n", n);
  convo += ChatmlTurn("assistant", first.text) + ChatmlTurn("user", "Tell me about a cat");
  const test::RunReference second = test::RunGreedy(Model(), convo + "<|im_start|>assistant\n", n);
  EXPECT_EQ(chat.out(), first.text + "\n" + second.text + "\n");

  const std::string err = chat.Stderr();
  EXPECT_NE(err.find("chat: 2 answers"), std::string::npos) << err;
  // The second turn fed only what the cache did not hold: less than both prompts whole.
  const int64_t fed = PromptTokensReported(err);
  EXPECT_GT(fed, static_cast<int64_t>(first.prompt_tokens.size())) << err;
  EXPECT_LT(fed, static_cast<int64_t>(first.prompt_tokens.size() + second.prompt_tokens.size())) << err;
  EXPECT_EQ(err.find("error:"), std::string::npos) << err;
}

TEST(Chat, ClearStartsTheConversationOver) {
  ChatProcess chat({"-m", Model(), "--chat-template", "chatml", "--temp", "0", "-n", "12", "-t", "1"});
  chat.Write("Hello there\n/clear\nOne day\n");
  chat.CloseStdin();  // the end of the input ends the chat as /exit does
  ASSERT_EQ(chat.Finish(), 0) << chat.Stderr();
  const test::RunReference a = test::RunGreedy(Model(), ChatmlTurn("user", "Hello there") + "<|im_start|>assistant\n", 12);
  const test::RunReference b = test::RunGreedy(Model(), ChatmlTurn("user", "One day") + "<|im_start|>assistant\n", 12);
  EXPECT_EQ(chat.out(), a.text + "\n" + b.text + "\n");
}

TEST(Chat, ALineEndingInABackslashGoesOnOnTheNext) {
  ChatProcess chat({"-m", Model(), "--chat-template", "chatml", "--temp", "0", "-n", "12", "-t", "1"});
  chat.Write("Once upon\\\na time\n/exit\n");
  ASSERT_EQ(chat.Finish(), 0) << chat.Stderr();
  const test::RunReference ref =
      test::RunGreedy(Model(), ChatmlTurn("user", "Once upon\na time") + "<|im_start|>assistant\n", 12);
  EXPECT_EQ(chat.out(), ref.text + "\n");
}

TEST(Chat, CtrlCStopsTheAnswerAndTheChatGoesOn) {
  // An answer that would run for seconds: no end of turn, and a long context.
  ChatProcess chat({"-m", Model(), "--chat-template", "chatml", "--ignore-eos", "-c", "8192", "-t", "1"});
  chat.Write("Hello\n");
  chat.ReadAtLeast(1);
  chat.Interrupt();
  ASSERT_TRUE(chat.WaitStderr("[stopped]")) << chat.Stderr();
  chat.Write("/exit\n");
  ASSERT_EQ(chat.Finish(), 0) << chat.Stderr();
  const std::string err = chat.Stderr();
  EXPECT_NE(err.find("chat: 1 answers"), std::string::npos) << err;
  EXPECT_NE(err.find("stopped: interrupted"), std::string::npos) << err;
}

TEST(Chat, CtrlCAtThePromptEndsTheChatWithItsReport) {
  ChatProcess chat({"-m", Model(), "--chat-template", "chatml", "--temp", "0", "-n", "4", "-t", "1"});
  chat.Write("Hello\n");
  const test::RunReference ref = test::RunGreedy(Model(), ChatmlTurn("user", "Hello") + "<|im_start|>assistant\n", 4);
  chat.ReadAtLeast(ref.text.size() + 1);  // the answer and its newline: it waits for the next message now
  chat.Interrupt();
  ASSERT_EQ(chat.Finish(), 0) << chat.Stderr();
  EXPECT_EQ(chat.out(), ref.text + "\n");
  EXPECT_NE(chat.Stderr().find("chat: 1 answers"), std::string::npos) << chat.Stderr();
}

TEST(Chat, AConversationOverTheContextIsAnErrorAndTheChatGoesOn) {
  ChatProcess chat({"-m", Model(), "--chat-template", "chatml", "--temp", "0", "-n", "4", "-t", "1", "-c", "48"});
  std::string long_message;
  for (int i = 0; i < 40; ++i) long_message += "the cat sat on the mat ";
  chat.Write(long_message + "\nHi\n/exit\n");
  ASSERT_EQ(chat.Finish(), 0) << chat.Stderr();
  const std::string err = chat.Stderr();
  EXPECT_NE(err.find("error: the conversation is "), std::string::npos) << err;
  EXPECT_NE(err.find("the context holds 48 (raise -c, or /clear)"), std::string::npos) << err;
  EXPECT_NE(err.find("chat: 1 answers"), std::string::npos) << err;
  const test::RunReference ref = test::RunGreedy(Model(), ChatmlTurn("user", "Hi") + "<|im_start|>assistant\n", 4);
  EXPECT_EQ(chat.out(), ref.text + "\n");  // the refused message left no trace in the conversation
}

int CountErrorLines(const std::string& err) {
  int n = 0;
  for (size_t at = err.find("error:"); at != std::string::npos; at = err.find("error:", at + 1)) ++n;
  return n;
}

TEST(Chat, BadFlagsAndAModelWithoutATemplateAreOneLineErrors) {
  for (const std::string& args :
       {std::string("-p hello"), std::string("--bogus"), std::string("-n -2"), std::string("--temp x"),
        std::string("--chat-template no-such-template"), std::string("")}) {
    SCOPED_TRACE(args);
    // stories260K has no template of its own and none of the built-ins' special tokens.
    const test::CmdResult r =
        test::RunCommand(test::TandemBin() + " chat -m " + test::ShellQuote(Model()) + " " + args + " </dev/null");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(CountErrorLines(r.err), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
}  // namespace tandem
