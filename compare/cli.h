// The `hkv` command line: one program, one function per subcommand.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace hkv {

struct Model;
enum class Prefill;

// Parsed `--key value` and `--flag` arguments after the subcommand.
struct Args {
  std::string command;
  std::map<std::string, std::string> opts;
  std::vector<std::string> positional;

  bool has(const std::string& k) const { return opts.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const;
  std::string need(const std::string& k) const;  // throws UsageError if missing
  long long get_int(const std::string& k, long long def) const;
  // A comma-separated list of integers (def when absent); UsageError naming the option otherwise.
  std::vector<long long> get_int_list(const std::string& k, const std::string& def) const;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Refuse non-finite logits (naming the model and the token) and contexts past max_position_embeddings
// (naming the token file and the model) before anything is written.
void check_logits_finite(const std::vector<float>& logits, int64_t vocab, const std::string& model);
void check_context(const std::string& tokens_path, int64_t n, const Model& m);
// --prefill exact|fast|auto (default exact); anything but exact needs --backend cuda (the oracle has only the
// exact path). UsageError otherwise.
Prefill prefill_arg(const Args& a, const std::string& backend);

// Commands and backends that need the engine call this first (defined with the engine, compare/engine_cli.cpp):
// where no CUDA device can be used it throws, naming the command and CUDA's reason (exit code 2).
void require_gpu(const std::string& what);

// Returns the process exit code: 0 success, 1 a check that failed (gate/diff), 2 usage or input error.
int run_cli(int argc, char** argv);

int cmd_format(const Args& a);
int cmd_logits(const Args& a);
int cmd_generate(const Args& a);
int cmd_gate(const Args& a);
int cmd_score(const Args& a);
int cmd_hash(const Args& a);
int cmd_diff(const Args& a);
// The engine's commands (compare/engine_cli.cpp; without the engine they refuse with a clear message).
int cmd_logits_cuda(const Args& a);
int cmd_generate_cuda(const Args& a);
int cmd_bench(const Args& a);
int cmd_bench_ops(const Args& a);
// "a,b,,c" -> {"a", "b", "c"}
std::vector<std::string> split_list(const std::string& s);
int cmd_bench_prefill(const Args& a);  // compare/prefill_cli.cpp

}  // namespace hkv
