#include "compare/cli.h"

int main(int argc, char** argv) { return hkv::run_cli(argc, argv); }
