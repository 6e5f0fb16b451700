// The `hkv` command line: one program, one function per subcommand.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace hkv {

struct Model;
enum class Prefill;

// The options given to one subcommand, as the grammar (compare/commands.cpp) parsed and checked them: option name
// (without "--") -> its value as text ("" for a flag).
struct Args {
  std::string command;
  std::map<std::string, std::string> opts;
  std::vector<std::string> positional;

  bool has(const std::string& k) const { return opts.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const;
  std::string need(const std::string& k) const;  // throws UsageError if missing
  // A number in parse_count's syntax (def when absent); UsageError naming the option otherwise.
  long long get_int(const std::string& k, long long def) const;
  // A comma-separated list of such numbers (def when absent); UsageError naming the option otherwise.
  std::vector<long long> get_int_list(const std::string& k, const std::string& def) const;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The one number syntax of every count the command line takes (depths, tokens, rows, ...): decimal digits with an
// optional sign and an optional suffix K (x1024) or M (x1048576), either case: "262144", "8K", "1M", "-3".
// False when `s` is not such a number or does not fit a long long.
bool parse_count(const std::string& s, long long* out);
inline constexpr long long kNoLimit = (1LL << 62);

// Refuse non-finite logits (naming the model and the token) and contexts past max_position_embeddings
// (naming the token file and the model) before anything is written.
void check_logits_finite(const std::vector<float>& logits, int64_t vocab, const std::string& model);
void check_context(const std::string& tokens_path, int64_t n, const Model& m);
// --prefill exact|fast|auto (default exact); anything but exact needs --backend cuda (the oracle has only the
// exact path). UsageError otherwise.
Prefill prefill_arg(const Args& a, const std::string& backend);

// --model's value loaded, after checking that it names something: a missing path, or a folder without config.json
// (with the nearest folder that has one), is refused naming the path as the user typed it.
Model load_model_arg(const std::string& model);
void check_model_arg(const std::string& model);

// The tokens a command generated, as its user reads them: the text for a byte-level model (a vocabulary of 256
// byte values), else token ids "[1, 2, 3]"; ids also where `ids` is set. Ends with a newline.
std::string generated_text(const std::vector<int32_t>& tokens, int64_t vocab, bool ids);

// Commands and backends that need the engine call this first (defined with the engine, compare/engine_cli.cpp):
// where no CUDA device can be used it throws, naming the command, the reason and what runs on the CPU instead
// (exit code 2).
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
