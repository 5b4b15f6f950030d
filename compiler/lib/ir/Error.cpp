#include "tilefuse/Error.h"

#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

namespace tilefuse {
namespace {

struct SourceText {
  std::string text;
  int firstLine;
};

std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, SourceText, std::less<>>& sources() {
  static std::map<std::string, SourceText, std::less<>> s;
  return s;
}

// The text of line `line` of `file`, from registered sources or the disk.
std::string sourceLine(const std::string& file, int line) {
  std::string text;
  int first = 1;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    auto it = sources().find(file);
    if (it != sources().end()) {
      text = it->second.text;
      first = it->second.firstLine;
    }
  }
  std::istringstream in(text);
  std::ifstream fin;
  std::istream* s = &in;
  if (text.empty()) {
    fin.open(file);
    if (!fin) return {};
    s = &fin;
  }
  std::string l;
  for (int n = first; std::getline(*s, l); ++n)
    if (n == line) return l;
  return {};
}

}  // namespace

Location Location::make(std::string_view file, int line, int col) {
  static std::set<std::string, std::less<>> pool;
  std::lock_guard<std::mutex> lock(registryMutex());
  auto it = pool.find(file);
  if (it == pool.end()) it = pool.emplace(file).first;
  return Location{&*it, line, col};
}

std::string Location::str() const {
  if (!file) return "<unknown>";
  return *file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

void registerSource(std::string_view file, std::string text, int firstLine) {
  std::lock_guard<std::mutex> lock(registryMutex());
  sources()[std::string(file)] = SourceText{std::move(text), firstLine};
}

std::string renderDiagnostic(const Location& loc, std::string_view message) {
  std::string out = loc.str() + ": error: " + std::string(message);
  if (!loc.known()) return out;
  std::string line = sourceLine(*loc.file, loc.line);
  if (line.empty()) return out;
  out += "\n" + line + "\n";
  for (int i = 1; i < loc.col && i <= static_cast<int>(line.size()); ++i) out += line[i - 1] == '\t' ? '\t' : ' ';
  out += "^";
  return out;
}

UserError::UserError(Location loc, std::string message)
    : std::runtime_error(renderDiagnostic(loc, message)), loc_(loc), message_(std::move(message)) {}

}  // namespace tilefuse
