#pragma once

// The user's side of `deepinfer generate --chat`: reading prompts and Ctrl-C.
//
// On a terminal (stdin and stderr both ttys) prompts are read with libedit: emacs-style editing
// keys, Up/Down through this session's earlier prompts (kept in memory only), and the user's
// ~/.editrc. Ctrl-C is caught: during a reply it asks the reply to stop (StopRequested()); at
// the prompt Read() answers kInterrupted. Anywhere else (pipes, files) prompts are plain lines
// from stdin and SIGINT keeps its default action, so scripted use is unchanged.
//
// Threads: one ChatInput per process, used from the main thread only; the SIGINT handler only
// sets a flag (and exits on a second Ctrl-C that arrives before the first was seen).

#include <memory>
#include <string>

namespace deepinfer::cli {

class ChatInput {
 public:
  enum class Result {
    kLine,         // *line holds one line, without its newline
    kEof,          // Ctrl-D on an empty line, or the end of stdin
    kInterrupted,  // Ctrl-C at the prompt; *line holds what had been typed (may be empty)
  };

  // Chooses the terminal or the plain reader from what stdin and stderr are. `prompt` is shown
  // before each line (on stderr).
  static std::unique_ptr<ChatInput> Create(const std::string& prompt);
  virtual ~ChatInput() = default;

  // True when reading from a terminal with line editing.
  virtual bool interactive() const = 0;

  // Reads one line. Lines are not added to the history; call AddHistory for those worth
  // recalling.
  virtual Result Read(std::string* line) = 0;
  virtual void AddHistory(const std::string& line) = 0;
};

// True once Ctrl-C was pressed since the last ClearStopRequest(): the reply being generated
// should end. Always false when stdin is not a terminal. Async-signal-safe.
bool StopRequested();
void ClearStopRequest();

}  // namespace deepinfer::cli
