// Runs the built `hkv` binary (HKV_BINARY) as a user would, for the tests that check what it prints and returns.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace hkv_test {

struct HkvRun {
  int code = -1;    // the exit code; 128 + the signal where one ended it
  std::string out;  // stdout
  std::string err;  // stderr
  std::string first_err_line() const { return err.substr(0, err.find('\n')); }
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `hkv ARGS...` with no standard input; stdout and stderr go through files in `scratch` (a folder it may use).
inline HkvRun run_hkv_in(const std::filesystem::path& scratch, const std::vector<std::string>& args) {
  std::string cmd = shell_quote(HKV_BINARY);
  for (const std::string& a : args) cmd.append(" ").append(shell_quote(a));
  const std::filesystem::path out = scratch / "hkv.stdout", err = scratch / "hkv.stderr";
  cmd.append(" </dev/null >").append(shell_quote(out.string())).append(" 2>").append(shell_quote(err.string()));
  const int status = std::system(cmd.c_str());
  HkvRun r;
  r.code = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

}  // namespace hkv_test
