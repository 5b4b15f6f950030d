// The two kinds of error: UserError (a bad kernel, bad IR text or a bad
// argument; rendered as file:line:col, the source line and a caret) and
// InternalError (a compiler bug).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tilefuse {

struct Location {
  const std::string* file = nullptr;  // interned; null when unknown
  int line = 0;
  int col = 0;

  static Location make(std::string_view file, int line, int col);
  bool known() const { return file != nullptr; }
  std::string str() const;  // "file:line:col", or "<unknown>"
  bool operator==(const Location& o) const = default;
};

// Registers source text under a file name so diagnostics can quote the line
// even when the file is not on disk (IR text from stdin, Python source strings).
// `firstLine` is the line number of the text's first line in that file.
void registerSource(std::string_view file, std::string text, int firstLine = 1);

class UserError : public std::runtime_error {
 public:
  UserError(Location loc, std::string message);
  const Location& loc() const { return loc_; }
  const std::string& message() const { return message_; }

 private:
  Location loc_;
  std::string message_;
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error("internal compiler error: " + what) {}
};

// "file:line:col: error: message" followed by the source line and a caret.
std::string renderDiagnostic(const Location& loc, std::string_view message);

}  // namespace tilefuse
