// The `hkv` command line's grammar (compare/commands.cpp): its subcommands and options, parsed by CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

namespace hkv {

struct Args;

// Every subcommand with its options. Option values are kept as text and handed to the command through Args.
struct Cli {
  Cli();
  // Parses argv. Returns -1 with *out filled when a command is to run; otherwise the exit code, having printed
  // the help, the version or the error (exit 2, one line on stderr starting "hkv: error: ").
  int parse(int argc, char** argv, Args* out);
  // Every command's options as Markdown (docs/CLI.md).
  std::string markdown_help();

  CLI::App app;

 private:
  CLI::Option* opt(CLI::App* c, const std::string& name, const std::string& value, const std::string& help);
  CLI::Option* flag(CLI::App* c, const std::string& name, const std::string& help);
  std::map<std::string, std::map<std::string, std::string>> raw;  // command -> option -> value text
  std::map<std::string, std::map<std::string, bool>> flags;       // command -> flag -> given
  std::map<std::string, std::vector<std::string>> positional;     // command -> positional arguments
  bool version = false, markdown = false;
};

}  // namespace hkv
