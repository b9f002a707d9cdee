#include "cli/chat_input.h"

#include <errno.h>
#include <histedit.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <climits>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cwchar>
#include <iostream>

namespace deepinfer::cli {
namespace {

volatile std::sig_atomic_t g_stop_requested = 0;
volatile std::sig_atomic_t g_at_prompt = 0;

// Ctrl-C. At the prompt the terminal is in libedit's mode and the reader turns the flag into
// kInterrupted. During a reply the generation loop polls the flag between tokens; a second
// Ctrl-C before it did means the loop is stuck in a long step, so the process ends as a shell
// would end it (128 + SIGINT). The terminal is in its normal mode then, so nothing needs undoing.
void OnSigint(int) {
  if (g_stop_requested && !g_at_prompt) _exit(130);
  g_stop_requested = 1;
}

class PlainInput : public ChatInput {
 public:
  explicit PlainInput(std::string prompt) : prompt_(std::move(prompt)) {}
  bool interactive() const override { return false; }
  Result Read(std::string* line) override {
    std::fputs(prompt_.c_str(), stderr);
    return std::getline(std::cin, *line) ? Result::kLine : Result::kEof;
  }
  void AddHistory(const std::string&) override {}

 private:
  std::string prompt_;
};

class TerminalInput : public ChatInput {
 public:
  explicit TerminalInput(std::string prompt) : prompt_(std::move(prompt)) {}
  ~TerminalInput() override {
    if (el_ != nullptr) el_end(el_);
    if (history_ != nullptr) history_end(history_);
  }

  // False when libedit cannot drive this terminal; the caller then reads plain lines.
  bool Init() {
    // libedit decodes multibyte input (UTF-8 prompts) by the locale's character type.
    std::setlocale(LC_CTYPE, "");
    el_ = el_init("deepinfer", stdin, stderr, stderr);
    history_ = history_init();
    if (el_ == nullptr || history_ == nullptr) return false;
    HistEvent event;
    history(history_, &event, H_SETSIZE, 1000);
    history(history_, &event, H_SETUNIQUE, 1);
    el_set(el_, EL_CLIENTDATA, this);
    el_set(el_, EL_PROMPT, &TerminalInput::Prompt);
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_HIST, history, history_);
    // Our own read function: libedit's retries a read that SIGINT interrupted, which would
    // swallow the first Ctrl-C at the prompt.
    el_set(el_, EL_GETCFN, &TerminalInput::ReadChar);
    el_source(el_, nullptr);  // ~/.editrc, as in other libedit programs

    struct sigaction action = {};
    action.sa_handler = OnSigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a read at the prompt must return EINTR
    sigaction(SIGINT, &action, nullptr);
    return true;
  }

  bool interactive() const override { return true; }

  Result Read(std::string* line) override {
    line->clear();
    interrupted_ = false;
    echoed_ctrl_c_ = false;
    typed_.clear();
    el_resize(el_);  // the window may have changed during the reply (no SIGWINCH handler)
    g_at_prompt = 1;
    int count = 0;
    const char* text = el_gets(el_, &count);
    g_at_prompt = 0;
    if (interrupted_ || g_stop_requested) {
      g_stop_requested = 0;
      *line = typed_;
      // The terminal driver has shown "^C" already when it echoes control characters.
      std::fputs(echoed_ctrl_c_ ? "\n" : "^C\n", stderr);
      return Result::kInterrupted;
    }
    if (text == nullptr || count <= 0) {
      std::fputc('\n', stderr);  // libedit leaves the cursor after the prompt on Ctrl-D
      return Result::kEof;
    }
    line->assign(text, count);
    while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
    return Result::kLine;
  }

  void AddHistory(const std::string& line) override {
    HistEvent event;
    history(history_, &event, H_ENTER, line.c_str());
  }

 private:
  static char* Prompt(EditLine* el) {
    TerminalInput* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    return self->prompt_.data();
  }

  // libedit's read function: one character from stdin. Returns 1 with *out set, 0 at end of
  // input, -1 when Ctrl-C ends the line.
  static int ReadChar(EditLine* el, wchar_t* out) {
    TerminalInput* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    char bytes[MB_LEN_MAX];
    size_t num_bytes = 0;
    while (true) {
      if (g_stop_requested) return self->Interrupted(el);
      char byte = 0;
      ssize_t got = read(STDIN_FILENO, &byte, 1);
      if (got == 0) return 0;
      if (got < 0) {
        if (errno == EINTR) continue;  // the flag check above decides
        return -1;
      }
      // With ISIG cleared (an ~/.editrc may do that) Ctrl-C arrives as a character.
      if (byte == '\x03' && num_bytes == 0) return self->Interrupted(el);
      bytes[num_bytes++] = byte;
      std::mbstate_t state{};  // fresh each time: the whole sequence so far is decoded again
      size_t used = std::mbrtowc(out, bytes, num_bytes, &state);
      if (used == static_cast<size_t>(-2) && num_bytes < sizeof(bytes)) continue;
      if (used == static_cast<size_t>(-1) || used == static_cast<size_t>(-2)) {
        // Not a character in this locale: pass the first byte through as libedit itself does.
        *out = static_cast<unsigned char>(bytes[0]);
      }
      return 1;
    }
  }

  int Interrupted(EditLine* el) {
    const LineInfo* info = el_line(el);
    if (info != nullptr) typed_.assign(info->buffer, info->lastchar - info->buffer);
    termios mode{};
    echoed_ctrl_c_ = tcgetattr(STDIN_FILENO, &mode) == 0 && (mode.c_lflag & ECHO) &&
                     (mode.c_lflag & ECHOCTL) && (mode.c_lflag & ISIG);
    interrupted_ = true;
    errno = EINTR;
    return -1;
  }

  std::string prompt_;
  EditLine* el_ = nullptr;
  History* history_ = nullptr;
  bool interrupted_ = false;
  bool echoed_ctrl_c_ = false;
  std::string typed_;
};

}  // namespace

std::unique_ptr<ChatInput> ChatInput::Create(const std::string& prompt) {
  if (isatty(STDIN_FILENO) && isatty(STDERR_FILENO)) {
    auto terminal = std::make_unique<TerminalInput>(prompt);
    if (terminal->Init()) return terminal;
  }
  return std::make_unique<PlainInput>(prompt);
}

bool StopRequested() { return g_stop_requested != 0; }

void ClearStopRequest() { g_stop_requested = 0; }

}  // namespace deepinfer::cli
