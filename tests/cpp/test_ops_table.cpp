// Ops.def against the text corpora: every row needs a round-trip example in
// tests/lit/{ops,gpu}/roundtrip.tir (GPU-level ops in gpu/) and an invalid use in
// tests/lit/{ops,gpu}/invalid_*.tir, so adding a row without both fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"

namespace tilefuse {
namespace {

const std::filesystem::path kLit = std::filesystem::path(TILEFUSE_SOURCE_DIR) / "tests" / "lit";
const char* const kCorpora[] = {"ops", "gpu"};

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << "cannot read " << p;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool isCommentLine(const std::string& l) {
  size_t i = l.find_first_not_of(' ');
  return i != std::string::npos && l.compare(i, 2, "//") == 0;
}

std::string mnemonicsOf(const std::vector<const OpInfo*>& ops) {
  std::string s;
  for (const OpInfo* i : ops) s += (s.empty() ? "" : ", ") + std::string(i->mnemonic);
  return s;
}

TEST(OpsTable, RowsAreConsistent) {
  const auto& ops = allOps();
  ASSERT_FALSE(ops.empty());
  std::set<std::string_view> seen;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpInfo& info = ops[i];
    SCOPED_TRACE(std::string(info.mnemonic));
    EXPECT_EQ(static_cast<size_t>(info.kind), i);
    EXPECT_EQ(&opInfo(info.kind), &info);
    EXPECT_EQ(opInfoByMnemonic(info.mnemonic), &info);
    EXPECT_TRUE(seen.insert(info.mnemonic).second) << "duplicate mnemonic";
    EXPECT_FALSE(info.mnemonic.empty());
    EXPECT_GE(info.minOperands, 0);
    if (info.maxOperands >= 0) {
      EXPECT_LE(info.minOperands, info.maxOperands);
    }
    EXPECT_GE(info.numResults, -1);
    EXPECT_GE(info.numRegions, 0);
    EXPECT_TRUE(!info.has(Terminator) || info.numResults == 0);
    EXPECT_TRUE(!info.has(Pure) || !(info.has(WritesMemory) || info.has(ReadsMemory)));
    EXPECT_TRUE(!(info.has(IntOnly) || info.has(FloatOnly)) || info.has(Elementwise));
    EXPECT_FALSE(info.has(IntOnly) && info.has(FloatOnly));
  }
  EXPECT_EQ(opInfoByMnemonic("no_such_op"), nullptr);
}

// Each roundtrip.tir without its comment lines must verify and print back unchanged.
TEST(OpsTable, RoundTripCorpusCoversEveryOp) {
  std::set<OpKind> present;
  for (const char* dir : kCorpora) {
    std::filesystem::path file = kLit / dir / "roundtrip.tir";
    SCOPED_TRACE(file.string());
    std::string text;
    for (const auto& l : lines(readFile(file)))
      if (!isCommentLine(l)) text += l + "\n";
    std::unique_ptr<Module> m;
    ASSERT_NO_THROW(m = parseModule(text, file.string())) << "roundtrip.tir does not parse";
    ASSERT_NO_THROW(verifyModule(*m)) << "roundtrip.tir does not verify";
    EXPECT_EQ(printModule(*m), text);
    walkModule(*m, [&](Op* op) { present.insert(op->kind()); });
  }
  std::vector<const OpInfo*> missing;
  for (const auto& info : allOps())
    if (!present.count(info.kind)) missing.push_back(&info);
  EXPECT_TRUE(missing.empty()) << "ops without a round-trip example in a roundtrip.tir: " << mnemonicsOf(missing);
}

struct Expected {
  int line = 0, col = 0;
  std::string message;
};

// Each `// -----` chunk of an invalid_*.tir file (split as tilefuse-opt --split-input-file
// does) carries one `// CHECK: :[[@LINE+N]]:COL: error: MESSAGE` and must fail exactly there.
TEST(OpsTable, InvalidCorpusCoversEveryOp) {
  static const std::regex check(R"(// CHECK: :\[\[@LINE\+(\d+)\]\]:(\d+): error: (.*)$)");
  static const std::regex opName(R"(^'([a-z_0-9]+)' )");
  std::set<std::string> covered;
  int numFiles = 0, chunks = 0;
  std::vector<std::filesystem::path> files;
  for (const char* dir : kCorpora)
    for (const auto& entry : std::filesystem::directory_iterator(kLit / dir)) files.push_back(entry.path());
  for (const auto& path : files) {
    std::string name = path.filename().string();
    if (name.rfind("invalid", 0) != 0 || path.extension() != ".tir") continue;
    ++numFiles;
    auto all = lines(readFile(path));
    size_t begin = 0;
    while (begin <= all.size()) {
      size_t end = begin;
      while (end < all.size() && all[end].rfind("// -----", 0) != 0) ++end;
      std::string text;
      std::vector<Expected> want;
      for (size_t i = begin; i < end; ++i) {
        text += all[i] + "\n";
        std::smatch mt;
        if (std::regex_search(all[i], mt, check))
          want.push_back({static_cast<int>(i + 1) + std::stoi(mt[1]), std::stoi(mt[2]), mt[3]});
      }
      int firstLine = static_cast<int>(begin) + 1;
      SCOPED_TRACE(name + ":" + std::to_string(firstLine));
      ++chunks;
      ASSERT_EQ(want.size(), 1u) << "each chunk needs exactly one CHECK line";
      try {
        auto m = parseModule(text, path.string(), firstLine);
        verifyModule(*m);
        ADD_FAILURE() << "no error; expected: " << want[0].message;
      } catch (const UserError& e) {
        EXPECT_EQ(e.loc().line, want[0].line) << e.what();
        EXPECT_EQ(e.loc().col, want[0].col) << e.what();
        EXPECT_EQ(e.message().rfind(want[0].message, 0), 0u) << e.what();
        std::smatch mt;
        if (std::regex_search(e.message(), mt, opName)) covered.insert(mt[1]);
      }
      begin = end + 1;
    }
  }
  EXPECT_GE(numFiles, 2);
  EXPECT_GT(chunks, static_cast<int>(allOps().size()));
  std::vector<const OpInfo*> missing;
  for (const auto& info : allOps())
    if (!covered.count(std::string(info.mnemonic))) missing.push_back(&info);
  EXPECT_TRUE(missing.empty()) << "ops without an invalid-use case in invalid_*.tir: " << mnemonicsOf(missing);
}

}  // namespace
}  // namespace tilefuse
