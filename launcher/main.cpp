// The `tandem` binary: one entry point for every user-facing command.
// Later issues add serve/ps/scale/stop; each command is a function taking
// its parsed options, and main() only dispatches.
#include <unistd.h>

#include <atomic>
#include <csignal>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "launcher/generate.h"
#include "launcher/inspect.h"
#include "launcher/ps.h"
#include "launcher/scale.h"
#include "launcher/serve.h"
#include "launcher/text_commands.h"

namespace {

const char* kUsage = R"(usage: tandem <command> [options]

commands:
  inspect [--model PATH] [--json] [--no-canonical] [--checksums]
      Print a model's architecture, sizes, dtypes and per-tensor layout.
      PATH is a GGUF file or a Hugging Face directory (config.json + safetensors).
      Without --model, the built-in default model (made at build time) is used.
  logits --model PATH --tokens "ID ID ..." [--greedy N] [ENGINE]
      Run the prompt through the model in one pass and print JSON: the logits of
      every prompt position, then N greedy steps with their logits.
  run --model PATH (--prompt TEXT | --tokens "ID ID ...") [-n N] [--temperature T]
      [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] [--seed S]
      Generate up to N tokens (default 32), greedy unless --temperature > 0.
      With --prompt the model's own tokenizer encodes the text and the output
      is streamed as text; with --tokens the new ids are printed as JSON.
  serve [--model PATH] [--host 127.0.0.1] [--port 8080] [--api-key KEY]
      [--model-name NAME] [ENGINE]
      Serve the OpenAI-compatible API: POST /v1/completions, /v1/chat/completions
      (streaming or not), GET /v1/models, /health, /metrics. Stop with Ctrl-C.
      The graph: loader, expert workers, a gpu worker (host backend) and the
      coordinator (HTTP API, scheduler), each its own supervised process.
      --split-roles        two gpu workers: gpu:1 prefills each prompt and hands its
                           KV cache to gpu:0, which decodes (they run at the same time)
  ENGINE (logits, run, serve): by default a loader process builds the weight arena
      and the routed experts run in expert-worker processes (one per NUMA node);
      --expert-workers N   that many workers (virtual nodes when N > nodes)
      --single-process     everything in this process, from the model files; with
                           --expert-workers N every role of the graph in this process
                           (same arena slices, same sums as N worker processes)
      --hold ROLE:INDEX    loader:0 or expert:N (serve: also gpu:0, coordinator:0;
                           gpu:1 with --split-roles)
                           waits before its main loop and the exact gdb command to
                           attach and release it is printed
  ps [--json]
      List the running graphs (under $TANDEM_RUN_BASE or /dev/shm/tandem-<uid>):
      role, index, pid, NUMA node, cores, state (starting, ready, restarting,
      failed), restarts, RSS and PSS of every process, and the summed PSS.
  scale expert-workers=N [--run NAME] [--timeout S]
      Re-plan a serving graph's expert split: a new arena beside the old one, its
      workers, then the gpu worker moves over (running requests wait and go on).
  stop [--run NAME] [--timeout S]
      Stop every running graph (or the named run) cleanly: SIGTERM to its
      launcher, SIGKILL after S seconds (default 30).
  tokenize --tokenizer PATH (--text S | --file F) [--no-add-special] [--no-parse-special]
      Print {"ids": [...]} as Hugging Face's encode() gives them. PATH is a
      Hugging Face directory, a tokenizer.json or a GGUF file.
  detokenize --tokenizer PATH --ids "ID ID ..." [--skip-special]
      Print {"text": "..."}.
  chat-template --tokenizer PATH --messages FILE.json [--add-generation-prompt]
      [--tools FILE.json] [--var NAME=JSON ...]
      Render the model's chat template (tokenizer_config.json or GGUF) for the
      conversation in FILE.json (an array of messages, or {"messages", "tools"});
      --var sets other template variables, e.g. --var enable_thinking=false.
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

// Reads "--name value" pairs; returns false on an unknown option.
template <typename Handler>
bool parse_options(const std::vector<std::string>& args, const char* cmd, Handler&& handle) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i + 1 >= args.size() || !handle(a, args[i + 1])) {
      std::cerr << "tandem " << cmd << ": unknown option or missing value '" << a << "'\n" << kUsage;
      return false;
    }
    ++i;
  }
  return true;
}

float to_float(const std::string& name, const std::string& v) {
  try {
    size_t used = 0;
    float f = std::stof(v, &used);
    if (used == v.size()) return f;
  } catch (const std::exception&) {
  }
  throw tandem::Error(tandem::ErrorKind::kInvalidInput, name + ": '" + v + "' is not a number");
}

int to_int(const std::string& name, const std::string& v) {
  try {
    size_t used = 0;
    long long n = std::stoll(v, &used);
    if (used == v.size() && n >= INT32_MIN && n <= INT32_MAX) return int(n);
  } catch (const std::exception&) {
  }
  throw tandem::Error(tandem::ErrorKind::kInvalidInput, name + ": '" + v + "' is not an integer");
}

// Takes the engine flags out of args.
std::vector<std::string> engine_flags(const std::vector<std::string>& args, tandem::EngineOptions& e) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--single-process") {
      e.single_process = true;
    } else if (args[i] == "--hold" && i + 1 < args.size()) {
      e.hold = tandem::parse_hold_target(args[++i]);
    } else if (args[i] == "--expert-workers" && i + 1 < args.size()) {
      e.expert_workers = to_int(args[i], args[i + 1]);
      if (e.expert_workers < 1)
        throw tandem::Error(tandem::ErrorKind::kInvalidInput, "--expert-workers must be at least 1");
      ++i;
    } else {
      rest.push_back(args[i]);
    }
  }
  return rest;
}

int cmd_logits(const std::vector<std::string>& all) {
  tandem::LogitsOptions o;
  const std::vector<std::string> args = engine_flags(all, o.engine);
  o.engine.command = "logits";
  bool ok = parse_options(args, "logits", [&](const std::string& k, const std::string& v) {
    if (k == "--model") o.model = v;
    else if (k == "--tokens") o.tokens = tandem::parse_token_ids(v);
    else if (k == "--greedy") o.greedy = std::max(0, to_int(k, v));
    else return false;
    return true;
  });
  if (!ok) return 2;
  if (o.model.empty()) o.model = default_model();
  if (o.tokens.empty()) throw tandem::Error(tandem::ErrorKind::kInvalidInput, "--tokens is required");
  tandem::run_logits(o, std::cout);
  return 0;
}

int cmd_run(const std::vector<std::string>& all) {
  tandem::RunOptions o;
  const std::vector<std::string> args = engine_flags(all, o.engine);
  o.engine.command = "run";
  bool ok = parse_options(args, "run", [&](const std::string& k, const std::string& v) {
    if (k == "--model") o.model = v;
    else if (k == "--tokens") o.tokens = tandem::parse_token_ids(v);
    else if (k == "--prompt") o.prompt = v;
    else if (k == "-n" || k == "--max-tokens") o.max_tokens = std::max(0, to_int(k, v));
    else if (k == "--temperature") o.sampling.temperature = to_float(k, v);
    else if (k == "--top-k") o.sampling.top_k = to_int(k, v);
    else if (k == "--top-p") o.sampling.top_p = to_float(k, v);
    else if (k == "--min-p") o.sampling.min_p = to_float(k, v);
    else if (k == "--repetition-penalty") o.sampling.repetition_penalty = to_float(k, v);
    else if (k == "--seed") o.sampling.seed = uint64_t(to_int(k, v));
    else return false;
    return true;
  });
  if (!ok) return 2;
  if (o.model.empty()) o.model = default_model();
  if (o.tokens.empty() == !o.prompt.has_value())
    throw tandem::Error(tandem::ErrorKind::kInvalidInput, "give exactly one of --prompt and --tokens");
  tandem::run_generate(o, std::cout);
  return 0;
}

std::atomic<bool> g_stop{false};  // SIGINT/SIGTERM while serving

int cmd_serve(const std::vector<std::string>& all) {
  tandem::ServeOptions o;
  std::vector<std::string> args = engine_flags(all, o.engine);
  if (std::erase(args, std::string("--split-roles")) > 0) o.split_roles = true;
  o.engine.command = "serve";
  bool ok = parse_options(args, "serve", [&](const std::string& k, const std::string& v) {
    if (k == "--model") o.model = v;
    else if (k == "--host") o.host = v;
    else if (k == "--port") o.port = to_int(k, v);
    else if (k == "--api-key") o.api_key = v;
    else if (k == "--model-name") o.model_name = v;
    else return false;
    return true;
  });
  if (!ok) return 2;
  if (o.port < 0 || o.port > 65535) throw tandem::Error(tandem::ErrorKind::kInvalidInput, "--port must be 0..65535");
  if (o.model.empty()) o.model = default_model();
  std::signal(SIGINT, [](int) { g_stop = true; });
  std::signal(SIGTERM, [](int) { g_stop = true; });
  return tandem::run_serve(o, g_stop);
}

// Flags without values first, then "--name value" pairs.
int cmd_ps(const std::vector<std::string>& args) {
  tandem::PsOptions o;
  for (const std::string& a : args) {
    if (a == "--json") {
      o.json = true;
    } else {
      std::cerr << "tandem ps: unknown option '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  return tandem::run_ps(o, std::cout);
}

int cmd_stop(const std::vector<std::string>& args) {
  tandem::StopOptions o;
  if (!parse_options(args, "stop", [&](const std::string& k, const std::string& v) {
        if (k == "--run") o.run = v;
        else if (k == "--timeout") o.timeout = std::chrono::seconds(to_int(k, v));
        else return false;
        return true;
      }))
    return 2;
  return tandem::run_stop(o, std::cout);
}

int cmd_scale(const std::vector<std::string>& args) {
  tandem::ScaleOptions o;
  std::vector<std::string> rest;
  for (const std::string& a : args) {
    if (a.rfind("expert-workers=", 0) == 0) o.expert_workers = to_int("expert-workers", a.substr(15));
    else rest.push_back(a);
  }
  if (!parse_options(rest, "scale", [&](const std::string& k, const std::string& v) {
        if (k == "--run") o.run = v;
        else if (k == "--timeout") o.timeout = std::chrono::seconds(to_int(k, v));
        else return false;
        return true;
      }))
    return 2;
  if (o.expert_workers < 1) {
    std::cerr << "tandem scale: give expert-workers=N (N >= 1)\n" << kUsage;
    return 2;
  }
  return tandem::run_scale(o, std::cout);
}

int cmd_tokenize(std::vector<std::string> args) {
  tandem::TokenizeOptions o;
  std::vector<std::string> rest;
  for (const auto& a : args) {
    if (a == "--no-add-special") o.add_special = false;
    else if (a == "--no-parse-special") o.parse_special = false;
    else rest.push_back(a);
  }
  bool ok = parse_options(rest, "tokenize", [&](const std::string& k, const std::string& v) {
    if (k == "--tokenizer") o.tokenizer = v;
    else if (k == "--text") o.text = v;
    else if (k == "--file") o.file = v;
    else return false;
    return true;
  });
  if (!ok) return 2;
  tandem::run_tokenize(o, std::cout);
  return 0;
}

int cmd_detokenize(std::vector<std::string> args) {
  tandem::DetokenizeOptions o;
  std::vector<std::string> rest;
  for (const auto& a : args) {
    if (a == "--skip-special") o.skip_special = true;
    else rest.push_back(a);
  }
  bool ok = parse_options(rest, "detokenize", [&](const std::string& k, const std::string& v) {
    if (k == "--tokenizer") o.tokenizer = v;
    else if (k == "--ids") o.ids = tandem::parse_token_ids(v);
    else return false;
    return true;
  });
  if (!ok) return 2;
  tandem::run_detokenize(o, std::cout);
  return 0;
}

int cmd_chat_template(std::vector<std::string> args) {
  tandem::ChatTemplateOptions o;
  std::vector<std::string> rest;
  for (const auto& a : args) {
    if (a == "--add-generation-prompt") o.add_generation_prompt = true;
    else rest.push_back(a);
  }
  bool ok = parse_options(rest, "chat-template", [&](const std::string& k, const std::string& v) {
    if (k == "--tokenizer") o.tokenizer = v;
    else if (k == "--messages") o.messages_file = v;
    else if (k == "--tools") o.tools_file = v;
    else if (k == "--var") {
      const auto eq = v.find('=');
      if (eq == std::string::npos || eq == 0)
        throw tandem::Error(tandem::ErrorKind::kInvalidInput, "--var expects NAME=JSON, got '" + v + "'");
      o.vars.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else return false;
    return true;
  });
  if (!ok) return 2;
  tandem::run_chat_template(o, std::cout);
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
    if (cmd == "logits") return cmd_logits(args);
    if (cmd == "run") return cmd_run(args);
    if (cmd == "serve") return cmd_serve(args);
    if (cmd == "ps") return cmd_ps(args);
    if (cmd == "stop") return cmd_stop(args);
    if (cmd == "scale") return cmd_scale(args);
    if (cmd == "tokenize") return cmd_tokenize(args);
    if (cmd == "detokenize") return cmd_detokenize(args);
    if (cmd == "chat-template") return cmd_chat_template(args);
    std::cerr << "tandem: unknown command '" << cmd << "'\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", cmd, e.what());
    return 1;
  }
}
