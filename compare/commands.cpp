// The `hkv` command line's grammar: every subcommand and option, parsed by CLI11. Each option's text here is
// its `hkv CMD --help` line and its row of docs/CLI.md (`hkv --markdown-help` writes that file, and a test checks
// that it matches). Parsing refuses, with exit code 2 and a one-line reason, an unknown option (with the nearest
// known one), a missing value, a value outside its choices or range; the command functions (compare/cli.cpp,
// engine_cli.cpp, prefill_cli.cpp, bench_ops.cpp) then read the given options through `Args`.
#include "compare/commands.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "compare/cli.h"
#include "hkv_version.h"
#include "reference/kvformat.h"

namespace hkv {

namespace {

// ---- validators -----------------------------------------------------------------------------------

std::string range_text(long long lo, long long hi) {
  if (hi == kNoLimit) return "at least " + std::to_string(lo);
  return "between " + std::to_string(lo) + " and " + std::to_string(hi);
}

// One number or a comma-separated list of them (parse_count's syntax: 1024, 8K, 1M), each in [lo, hi].
CLI::Validator counts(long long lo, long long hi, bool list) {
  return CLI::Validator(
      [lo, hi, list](std::string& s) -> std::string {
        const std::vector<std::string> items = list ? split_list(s) : std::vector<std::string>{s};
        if (items.empty()) return "wants " + std::string(list ? "a list of numbers" : "a number") + ", got '" + s + "'";
        for (const std::string& item : items) {
          long long v = 0;
          if (!parse_count(item, &v))
            return "wants " + std::string(list ? "numbers" : "a number") + " like 1024, 8K or 1M, got '" + s + "'";
          if (v < lo || v > hi) return "'" + item + "' is not " + range_text(lo, hi);
        }
        return "";
      },
      "", "count");
}

// A cache format, or a comma-separated list of them, as KvFormat::parse reads them.
CLI::Validator formats(bool list) {
  return CLI::Validator(
      [list](std::string& s) -> std::string {
        const std::vector<std::string> items = list ? split_list(s) : std::vector<std::string>{s};
        if (items.empty()) return "names no cache format";
        for (const std::string& item : items) try {
            KvFormat::parse(item);
          } catch (const std::exception& e) {
            return e.what();
          }
        return "";
      },
      "", "format");
}

CLI::Validator one_of(std::vector<std::string> choices) {
  return CLI::Validator(
      [choices](std::string& s) -> std::string {
        if (std::find(choices.begin(), choices.end(), s) != choices.end()) return "";
        std::string all;
        for (const std::string& c : choices) all += (all.empty() ? "" : ", ") + c;
        return "'" + s + "' is not one of " + all;
      },
      "", "choice");
}

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The known name nearest to `typed`, for "did you mean": within two edits, or one that the typed name begins or that
// begins it (past three characters); "" when none is. The first of equally near names wins.
std::string nearest(const std::string& typed, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;
  for (const std::string& k : known) {
    size_t d = edit_distance(typed, k);
    if (typed.size() > 3 && (k.rfind(typed, 0) == 0 || typed.rfind(k, 0) == 0)) d = std::min<size_t>(d, 1);
    if (d < best_d) best_d = d, best = k;
  }
  return best;
}

}  // namespace

// ---- the grammar ------------------------------------------------------------------------------------

// An option that takes a value, stored as text in `raw` (read back through Args after the parse).
CLI::Option* Cli::opt(CLI::App* c, const std::string& name, const std::string& value, const std::string& help) {
  return c->add_option(name, raw[c->get_name()][name.substr(2)], help)->type_name(value);
}
CLI::Option* Cli::flag(CLI::App* c, const std::string& name, const std::string& help) {
  return c->add_flag(name, flags[c->get_name()][name.substr(2)], help);
}

Cli::Cli()
    : app("hkv: a CPU oracle and a CUDA engine for a Qwen3.5-style hybrid model, and the layer that "
          "compares them bit for bit.",
          "hkv") {
  app.require_subcommand(0, 1);
  app.set_help_flag("-h,--help", "print this help; `hkv CMD --help` prints a command's options");
  app.add_flag("--version", version, "print the version and the commit hkv was built from");
  app.add_flag("--markdown-help", markdown, "print every command's options as Markdown (docs/CLI.md)")
      ->group("");  // hidden
  app.footer(
      "Models (--model): builtin:tiny, builtin:tiny-mlx4, builtin:100m, builtin:27b, builtin:27b-mlx4 (synthetic\n"
      "weights), a synthetic spec (a JSON file with a \"synthetic\" key), or a checkpoint folder (config.json and\n"
      "safetensors: HF Qwen3_5ForCausalLM or ...ForConditionalGeneration, or MLX 4-bit), e.g. fixtures/trained/hf.\n"
      "Token files: a JSON array of integers, or raw little-endian uint32 (a name ending in .u32).\n"
      "Numbers: 1024, 8K (8192) or 1M (1048576), in every option that takes a count.\n"
      "Exit codes: 0 done, 1 a check failed (gate, diff), 2 bad usage or bad input.");
  const std::string kv_help =
      "the attention cache: bf16, fp8 or q4h (and the studies: q4h-max, which the engine runs too; the oracle's "
      "f32, q4h-norot, q4h-sym, q4h-mid, q4h-nf, q4h-g16, q4h-g64, q4h-g128, q4h-seedN)";
  const std::vector<std::string> backends = {"cpu", "cuda"}, prefills = {"exact", "fast", "auto"};

  CLI::App* c = app.add_subcommand("format", "pack a seeded cache row and show its bytes, its values and its error");
  opt(c, "--format", "FORMAT", "the row's format (default q4h; " + kv_help + ")")->check(formats(false));
  opt(c, "--row", "KIND", "the seeded row (default outliers)")
      ->check(one_of({"gaussian", "outliers", "near-duplicate"}));
  opt(c, "--seed", "N", "the row's seed (default 1)")->check(counts(0, kNoLimit, false));
  opt(c, "--head-dim", "N", "the row's length (default 256)")->check(counts(1, 65536, false));
  flag(c, "--grids", "print the grid study of docs/FORMAT.md instead");
  opt(c, "--rows", "N", "rows of the grid study (default 4096)")->check(counts(1, 1 << 24, false));
  opt(c, "--fixture", "FILE", "with --grids: add the K and V rows the fixture's model stores for its text")
      ->needs(c->get_option("--grids"));
  opt(c, "--tokens", "N", "with --fixture: the text's first N tokens (default 1024)")
      ->check(counts(1, kNoLimit, false))
      ->needs(c->get_option("--fixture"));

  c = app.add_subcommand("logits", "run the model over a token file and write its fp32 logits [tokens][vocab]");
  opt(c, "--model", "MODEL", "the model (below)")->required();
  opt(c, "--tokens", "FILE", "the token file")->required();
  opt(c, "--out", "FILE", "the logits file to write (little-endian fp32)")->required();
  opt(c, "--kv-cache", "FORMAT", kv_help + " (default bf16)")->check(formats(false));
  opt(c, "--backend", "cpu|cuda", "cpu (the oracle, default) or cuda (the engine)")->check(one_of(backends));
  opt(c, "--prefill", "exact|fast|auto",
      "the engine's prompt path: exact (default), fast (tensor cores, not exact) or auto")
      ->check(one_of(prefills));
  opt(c, "--threads", "N", "the oracle's threads (default: every core)")->check(counts(1, 4096, false));

  c = app.add_subcommand("score", "teacher-forced log-probability of every next token on the oracle; NLL, perplexity");
  opt(c, "--model", "MODEL", "the model")->required();
  opt(c, "--tokens", "FILE", "the token file")->required();
  opt(c, "--out", "FILE", "write the log-probabilities, fp32 [tokens - 1]");
  opt(c, "--kv-cache", "FORMAT", kv_help + " (default bf16)")->check(formats(false));
  opt(c, "--chunk", "N", "tokens fed at a time (default 256)")->check(counts(1, kNoLimit, false));
  opt(c, "--threads", "N", "the oracle's threads (default: every core)")->check(counts(1, 4096, false));

  c = app.add_subcommand("generate", "greedy decoding from a prompt; prints the text (byte-level models) or token ids");
  opt(c, "--model", "MODEL", "the model")->required();
  CLI::Option* prompt = opt(c, "--prompt", "TEXT", "the prompt as text (bytes, for byte-level models)");
  CLI::Option* tokens = opt(c, "--tokens", "FILE", "the prompt as a token file");
  prompt->excludes(tokens);
  opt(c, "--n", "N", "tokens to generate (default 32)")->check(counts(1, kNoLimit, false));
  opt(c, "--kv-cache", "FORMAT", kv_help + " (default bf16)")->check(formats(false));
  opt(c, "--backend", "cpu|cuda", "cpu (the oracle, default) or cuda (the engine)")->check(one_of(backends));
  opt(c, "--draft", "K", "draft K tokens by prompt lookup and verify them in one pass (the same output)")
      ->check(counts(0, kNoLimit, false));
  opt(c, "--batch", "B", "decode B sequences (the prompt less its last 0..B-1 tokens) together")
      ->check(counts(1, kNoLimit, false));
  opt(c, "--prefill", "exact|fast|auto",
      "the engine's prompt path: exact (default), fast or auto; decode is always exact")
      ->check(one_of(prefills));
  opt(c, "--threads", "N", "the oracle's threads (default: every core)")->check(counts(1, 4096, false));
  flag(c, "--ids", "print token ids, not text");

  c = app.add_subcommand("gate", "the fidelity gate: each cache format against bf16, teacher-forced, at each depth");
  opt(c, "--fixture", "FILE", "the gate fixture (default fixtures/trained-gate.json)");
  opt(c, "--backend", "cpu|cuda", "cpu (the oracle, default) or cuda (the engine)")->check(one_of(backends));
  opt(c, "--formats", "LIST", "the formats compared with bf16 (default: the fixture's)")->check(formats(true));
  opt(c, "--depths", "LIST", "the depths (default: the fixture's; on the CPU those estimated to finish in --budget)")
      ->check(counts(2, kNoLimit, true));
  opt(c, "--rows", "N", "rows scored from each depth (default: the fixture's)")->check(counts(1, kNoLimit, false));
  opt(c, "--budget", "MINUTES", "minutes the CPU gate may take when --depths is not given (default 10)")
      ->check(counts(1, kNoLimit, false));
  flag(c, "--no-floor", "leave out the noise floor (bf16 in fp32 against float64 accumulation)");
  opt(c, "--prefill", "exact|fast|auto", "the engine's prompt path: exact (default), fast or auto")
      ->check(one_of(prefills));
  opt(c, "--json", "FILE", "write the report as JSON");
  opt(c, "--md", "FILE", "write the report as Markdown");
  opt(c, "--html", "FILE", "write the report as a page with plots");
  opt(c, "--threads", "N", "the oracle's threads (default: every core)")->check(counts(1, 4096, false));

  c = app.add_subcommand("diff", "the differential suite: the engine against the oracle, one line a case");
  opt(c, "--op", "OP", "run only the cases of this op (--list shows them)");
  opt(c, "--filter", "REGEX", "run only the cases whose name matches this regular expression");
  flag(c, "--long", "add the long-context cases (8K and 32K tokens)");
  flag(c, "--list", "list the selected cases without running them");
  flag(c, "--require-gpu", "exit 77 (CTest's 'not run') where no GPU can be used");

  c = app.add_subcommand("bench", "engine decode speed of the 27B shape against its bandwidth floor (GPU)");
  opt(c, "--model", "MODEL", "the model (default builtin:27b-mlx4)");
  opt(c, "--depths", "LIST", "cache depths (default 1K,32K)")->check(counts(2, kNoLimit, true));
  opt(c, "--kv-cache", "LIST", "cache formats (default bf16,q4h)")->check(formats(true));
  opt(c, "--tokens", "N", "tokens timed a row, after 3 warm-up tokens (default 16)")->check(counts(1, kNoLimit, false));
  opt(c, "--graphs", "on|off",
      "replay each token's captured CUDA graph (on, default) or launch kernels one by one (off)")
      ->check(one_of({"on", "off"}));
  opt(c, "--embed", "host|device", "the embedding table in pinned host memory (host, default) or on the card (device)")
      ->check(one_of({"host", "device"}));
  opt(c, "--greedy", "device|host",
      "each token's argmax on the card (device, default) or its logits copied back (host)")
      ->check(one_of({"device", "host"}));
  opt(c, "--json", "FILE", "write the table as JSON (schema hkv-bench-1)");
  opt(c, "--peer", "FILE", "a peer's figures from the same card (a peer.json: compare/peer.h), printed beside hkv's");
  flag(c, "--attention", "then time the decode attention kernels alone");
  flag(c, "--attention-only", "time only the decode attention kernels");
  opt(c, "--attn-shape", "LIST", "attention kernel shapes to time (default auto; see docs/TUNING.md)");
  opt(c, "--reps", "N", "repetitions of the attention timing (default 20)")->check(counts(1, kNoLimit, false));
  opt(c, "--variants", "A;B", "engine switch settings timed in one process, e.g. \"default;HKV_PDL=0\"");
  opt(c, "--rounds", "N", "interleaved rounds of --variants (default 4)")->check(counts(1, kNoLimit, false));
  flag(c, "--timeline", "trace 5 more tokens a row with CUPTI and print where a token's time goes");
  flag(c, "--phases", "count the phases of one more token's DeltaNet recurrence (and attention chunks)");

  c = app.add_subcommand("bench-ops", "the exact MLX4 matrix-vector products of a 27B decode token alone (GPU)");
  opt(c, "--reps", "N", "repetitions a launch (default 50)")->check(counts(1, kNoLimit, false));
  flag(c, "--chain", "then time a token's 257 launches as one CUDA graph");
  opt(c, "--variants", "A;B", "with --chain: engine switch settings compared, e.g. \"default;HKV_MV_PF=0\"");
  opt(c, "--rounds", "N", "interleaved rounds of --variants (default 4)")->check(counts(1, kNoLimit, false));
  flag(c, "--phases", "with --chain: each launch's phases by %globaltimer (with --persistent: each step's too)");
  flag(c, "--as-token", "with --chain: the launches as a decode token makes them");
  flag(c, "--persistent",
       "with --chain: also as one persistent launch in each form (a barrier an item; a barrier a step, 16 or 20 warps "
       "a block; counters a slice of x, where every width is whole slices of 1024 columns), its bytes compared with "
       "the launches'");

  c = app.add_subcommand("bench-prefill", "the fast prefill path's time and peak memory, then exact decode (GPU)");
  opt(c, "--model", "MODEL", "the model (default builtin:27b-mlx4)");
  opt(c, "--tokens", "LIST", "prompt lengths (default 4K,32K)")->check(counts(1, kNoLimit, true));
  opt(c, "--kv-cache", "FORMAT", "the cache format (default q4h)")->check(formats(false));
  opt(c, "--decode", "N", "exact decode steps timed after each prompt (default 4)")->check(counts(0, kNoLimit, false));
  flag(c, "--exact", "also time the exact prefill");
  opt(c, "--embed", "host|device", "the embedding table in pinned host memory (host, default) or on the card (device)")
      ->check(one_of({"host", "device"}));
  opt(c, "--limit-gib", "G", "hold the rest of the card as ballast, to show the run fits in G GiB")
      ->check(counts(1, kNoLimit, false));
  flag(c, "--attention-only", "time the fast attention alone, the last pass of each length");
  opt(c, "--rows", "N", "with --attention-only: rows of the pass (default 4096)")->check(counts(1, kNoLimit, false));
  opt(c, "--reps", "N", "with --attention-only: repetitions (default 3)")->check(counts(1, kNoLimit, false));

  c = app.add_subcommand("hash", "print the xxh64 and size of files (for fixtures)");
  c->add_option("files", positional["hash"], "the files")->required();

  for (CLI::App* sub : app.get_subcommands({})) {
    sub->set_help_flag("-h,--help", "print this command's options");
    sub->allow_extras();  // unknown arguments are refused below, with the nearest known option
  }
}

// ---- parsing ------------------------------------------------------------------------------------------

// The error for the first argument the grammar did not take: an unknown option, with the nearest known one.
static std::string unknown_argument(CLI::App* sub, const std::string& arg) {
  const std::string cmd = "hkv " + sub->get_name();
  if (arg.rfind("-", 0) != 0 || arg == "-")
    return cmd + ": unexpected argument '" + arg + "' (`" + cmd + " --help` lists the options)";
  const std::string name = arg.substr(0, arg.find('='));
  std::vector<std::string> known;
  for (const CLI::Option* o : sub->get_options())
    for (const std::string& ln : o->get_lnames()) known.push_back("--" + ln);
  const std::string best = nearest(name, known);
  return cmd + ": unknown option " + name + (best.empty() ? "" : " (did you mean " + best + "?)") + " (`" + cmd +
         " --help` lists the options)";
}

int Cli::parse(int argc, char** argv, Args* out) {
  if (argc > 1 && argv[1][0] != '-') {  // an unknown command, with the nearest known one
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    const bool known = std::find(names.begin(), names.end(), argv[1]) != names.end();
    const std::string best = nearest(argv[1], names);
    if (!known) {
      std::fprintf(stderr, "hkv: error: hkv: unknown command '%s'%s (`hkv --help` lists the commands)\n", argv[1],
                   best.empty() ? "" : (" (did you mean " + best + "?)").c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    CLI::App* sub = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
    std::fputs(sub == &app ? app.help().c_str() : sub->help("hkv").c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    CLI::App* sub = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
    if (sub && !sub->remaining().empty()) {  // an unknown argument first: it explains the rest
      std::fprintf(stderr, "hkv: error: %s\n", unknown_argument(sub, sub->remaining().front()).c_str());
      return 2;
    }
    const std::string where = sub ? "hkv " + sub->get_name() : "hkv";
    std::string what = e.what();
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {  // CLI11: "--model: 1 required MODEL missing"
      const std::string name = what.substr(0, what.find(':'));
      const CLI::Option* o = sub ? sub->get_option_no_throw(name) : nullptr;
      if (o) what = name + " needs a value (" + o->get_type_name() + ")";
    }
    if (what.rfind(where, 0) != 0) what = where + ": " + what;
    std::fprintf(stderr, "hkv: error: %s\n", what.c_str());
    return 2;
  }
  if (version) {
    std::printf("hkv %s (commit %s)\n", kHkvVersion, kHkvCommit);
    return 0;
  }
  if (markdown) {
    std::fputs(markdown_help().c_str(), stdout);
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
    return argc < 2 ? 2 : 0;
  }
  CLI::App* sub = app.get_subcommands().front();
  const std::vector<std::string> rest = sub->remaining();
  if (!rest.empty()) {
    std::fprintf(stderr, "hkv: error: %s\n", unknown_argument(sub, rest.front()).c_str());
    return 2;
  }
  out->command = sub->get_name();
  for (const CLI::Option* o : sub->get_options()) {
    if (o->count() == 0 || o->get_lnames().empty()) continue;
    const std::string key = o->get_lnames().front();
    if (key == "help") continue;
    auto& values = raw[out->command];
    out->opts[key] = values.count(key) ? values[key] : std::string();
  }
  out->positional = positional[out->command];
  return -1;
}

// ---- the options as Markdown --------------------------------------------------------------------------

std::string Cli::markdown_help() {
  std::string s =
      "# The hkv command line\n\n"
      "Generated by `hkv --markdown-help` from the parser itself (tests/test_cli.cpp checks that this file matches);\n"
      "`hkv CMD --help` prints the same for one command.\n\n";
  std::string footer = app.get_footer();
  s += footer + "\n";
  for (CLI::App* sub : app.get_subcommands({})) {
    s += "\n## hkv " + sub->get_name() + "\n\n" + sub->get_description() + "\n\n";
    s += "| option | value | what it does |\n|---|---|---|\n";
    for (const CLI::Option* o : sub->get_options()) {
      if (o->get_lnames().empty()) {  // a positional
        s += "| `" + o->get_name() + "...` | " + (o->get_required() ? "required" : "") + " | " + o->get_description() +
             " |\n";
        continue;
      }
      if (o->get_lnames().front() == "help") continue;
      std::string value = flags[sub->get_name()].count(o->get_lnames().front()) ? "flag" : o->get_type_name();
      for (size_t at = value.find('|'); at != std::string::npos; at = value.find('|', at + 2))
        value.replace(at, 1, "\\|");
      if (o->get_required()) value += ", required";
      std::string desc = o->get_description();
      for (size_t at = desc.find('|'); at != std::string::npos; at = desc.find('|', at + 2)) desc.replace(at, 1, "\\|");
      s += "| `--" + o->get_lnames().front() + "` | " + value + " | " + desc + " |\n";
    }
  }
  return s;
}

// ---- dispatch -------------------------------------------------------------------------------------------

int run_cli(int argc, char** argv) {
  Args a;
  try {
    Cli cli;
    const int code = cli.parse(argc, argv, &a);
    if (code >= 0) return code;
    static const std::map<std::string, int (*)(const Args&)> commands = {
        {"format", cmd_format},     {"logits", cmd_logits},       {"score", cmd_score},
        {"generate", cmd_generate}, {"gate", cmd_gate},           {"diff", cmd_diff},
        {"bench", cmd_bench},       {"bench-ops", cmd_bench_ops}, {"bench-prefill", cmd_bench_prefill},
        {"hash", cmd_hash}};
    return commands.at(a.command)(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hkv: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace hkv
