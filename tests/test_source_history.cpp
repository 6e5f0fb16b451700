// Source comments say what and why, never when or by whom: no file under reference/, cuda/, compare/, tests/,
// scripts/ or CMakeLists.txt may name a work session ("session" followed by a number) or an issue ("issue #"
// followed by a number), in any case. That history belongs in docs/PERFORMANCE.md ("What has been tried") or
// docs/RESULTS.md, dated. Each offending line is printed as file:line: text.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// The files scanned: sources, scripts and CMake lists by extension, and the extensionless scripts of scripts/.
bool scanned(const fs::path& p, bool in_scripts) {
  static const std::vector<std::string> exts = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".sh", ".py", ".txt"};
  const std::string ext = p.extension().string();
  if (ext.empty()) return in_scripts;
  return std::find(exts.begin(), exts.end(), ext) != exts.end();
}

// Does `s` (lower case) hold `word`, an optional plural "s", then `sep` and a decimal digit?
bool names_number(const std::string& s, const std::string& word, const std::string& sep) {
  for (size_t at = s.find(word); at != std::string::npos; at = s.find(word, at + 1)) {
    size_t i = at + word.size();
    if (i < s.size() && s[i] == 's') ++i;
    if (s.compare(i, sep.size(), sep) != 0) continue;
    i += sep.size();
    if (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) return true;
  }
  return false;
}

// The line names a session or an issue by number. The words are split so that this file does not name them.
bool names_history(const std::string& line) {
  std::string s = line;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return names_number(s, std::string("sess") + "ion", " ") || names_number(s, std::string("iss") + "ue", " #");
}

// Every offending line under `root`'s folders `dirs` and files `files`, as "path:line: text", paths relative to root.
std::vector<std::string> history_lines(const fs::path& root, const std::vector<std::string>& dirs,
                                       const std::vector<std::string>& files) {
  std::vector<fs::path> paths;
  for (const std::string& f : files)
    if (fs::is_regular_file(root / f)) paths.push_back(root / f);
  for (const std::string& d : dirs) {
    if (!fs::is_directory(root / d)) continue;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / d))
      if (e.is_regular_file() && scanned(e.path(), d == "scripts")) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> out;
  for (const fs::path& p : paths) {
    std::ifstream in(p, std::ios::binary);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      if (names_history(line))
        out.push_back(fs::relative(p, root).generic_string() + ":" + std::to_string(n) + ": " + line);
  }
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

}  // namespace

TEST_CASE("source history: the scanner finds a planted line and passes a clean one") {
  const fs::path dir = fs::temp_directory_path() / "hkv_test_source_history";
  fs::remove_all(dir);
  fs::create_directories(dir / "cuda");
  fs::create_directories(dir / "scripts");
  std::ofstream(dir / "cuda" / "clean.cu") << "// the chunk's scores, in the order of ARITHMETIC.md\n"
                                              "// a session-free sessionless line; issue #a; sessions: none\n";
  std::ofstream(dir / "cuda" / "planted.cu") << "int x;\n// "
                                             << "Sess"
                                             << "ion 12 measured this\n";
  std::ofstream(dir / "cuda" / "planted2.cuh") << "// see "
                                               << "Iss"
                                               << "ue #7\n";
  std::ofstream(dir / "cuda" / "plural.h") << "// "
                                           << "sess"
                                           << "ions 8, 9\n";
  std::ofstream(dir / "scripts" / "run") << "# "
                                         << "iss"
                                         << "ue #4's goal\n";
  std::ofstream(dir / "cuda" / "notes.md") << "# "
                                           << "sess"
                                           << "ion 3 (not a source file)\n";
  const std::vector<std::string> found = history_lines(dir, {"cuda", "scripts"}, {"CMakeLists.txt"});
  fs::remove_all(dir);
  INFO(joined(found));
  REQUIRE(found.size() == 4);
  CHECK(found[0].rfind("cuda/planted.cu:2: ", 0) == 0);
  CHECK(found[1].rfind("cuda/planted2.cuh:1: ", 0) == 0);
  CHECK(found[2].rfind("cuda/plural.h:1: ", 0) == 0);
  CHECK(found[3].rfind("scripts/run:1: ", 0) == 0);
}

TEST_CASE("source history: no source file names a session or an issue by number") {
  const std::vector<std::string> found =
      history_lines(HKV_SOURCE_DIR, {"reference", "cuda", "compare", "tests", "scripts"}, {"CMakeLists.txt"});
  if (!found.empty())
    FAIL_CHECK(found.size() << " line(s) name a session or an issue; say what and why instead, and move the history "
                               "to docs/PERFORMANCE.md or docs/RESULTS.md, dated:\n"
                            << joined(found));
}
