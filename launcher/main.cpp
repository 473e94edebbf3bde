// The `tandem` binary: one entry point for every user-facing command.
// Later issues add serve/ps/scale/stop; each command is a function taking
// its parsed options, and main() only dispatches.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "launcher/inspect.h"

namespace {

const char* kUsage = R"(usage: tandem <command> [options]

commands:
  inspect [--model PATH] [--json] [--no-canonical] [--checksums]
      Print a model's architecture, sizes, dtypes and per-tensor layout.
      PATH is a GGUF file or a Hugging Face directory (config.json + safetensors).
      Without --model, the built-in default model (made at build time) is used.
  help
      Show this text.
)";

// The default model lives next to the binary: <build>/models/default.gguf.
std::string default_model() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  auto p = exe.parent_path().parent_path() / "models" / "default.gguf";
  if (ec || !std::filesystem::exists(p))
    throw tandem::Error(tandem::ErrorKind::kNotFound,
                        "no --model given and the default model (build/models/default.gguf) is "
                        "missing; rebuild, or pass --model PATH");
  return p.string();
}

int cmd_inspect(const std::vector<std::string>& args) {
  tandem::InspectOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--model" && i + 1 < args.size()) o.model = args[++i];
    else if (a.rfind("--model=", 0) == 0) o.model = a.substr(8);
    else if (a == "--json") o.json = true;
    else if (a == "--no-canonical") o.canonical = false;
    else if (a == "--checksums") o.checksums = true;
    else {
      std::cerr << "tandem inspect: unknown option '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  if (o.model.empty()) o.model = default_model();
  tandem::run_inspect(o, std::cout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::init_logging("launcher");
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "inspect") return cmd_inspect(args);
    std::cerr << "tandem: unknown command '" << cmd << "'\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", cmd, e.what());
    return 1;
  }
}
