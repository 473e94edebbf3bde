// The public entry point: inputs, errors (kinds, positions, raise_exception),
// limits against runaway templates, concurrent use, and robustness against
// mangled templates.
#include "common/text/jinja/chat_template.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "common/error.h"
#include "common/text/jinja/construct_cases.h"

namespace tandem::text {
namespace {

using nlohmann::ordered_json;

// A ChatML template in the style of Qwen's, with tools and reasoning.
constexpr const char* kChatml = R"({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- for tool in tools %}
        {{- tool | tojson }}
    {%- endfor %}
    {{- '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})";

ordered_json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

struct Failure {
  ErrorKind kind;
  std::string message;
};

Failure failure(const std::string& source, ChatTemplateInputs inputs = {}, const ChatTemplateLimits& limits = {}) {
  try {
    ChatTemplate::parse(source, "t", limits).render(inputs);
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  ADD_FAILURE() << "no error for: " << source;
  return {ErrorKind::kInternal, ""};
}

TEST(ChatTemplate, RendersMessagesToolsAndVariables) {
  const ChatTemplate t = ChatTemplate::parse(kChatml, "chatml");
  EXPECT_EQ(t.label(), "chatml");
  ChatTemplateInputs in;
  in.messages = ordered_json::array({user("Hi")});
  in.add_generation_prompt = true;
  EXPECT_EQ(t.render(in), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  in.extra = {{"enable_thinking", false}};
  in.tools = ordered_json::parse(R"([{"name": "f", "n": 1.0}])");
  EXPECT_EQ(t.render(in),
            "<|im_start|>system\n{\"name\": \"f\", \"n\": 1}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, CopiesShareTheParsedTemplate) {
  const ChatTemplate a = ChatTemplate::parse("{{ bos_token }}{{ messages|length }}{{ eos_token }}", "a");
  const ChatTemplate b = a;  // NOLINT(performance-unnecessary-copy-initialization): copies are the point
  ChatTemplateInputs in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.messages = ordered_json::array({user("x"), user("y")});
  EXPECT_EQ(b.render(in), "<s>2</s>");
}

TEST(ChatTemplate, RendersConcurrently) {
  const ChatTemplate t = ChatTemplate::parse(kChatml, "chatml");
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      ChatTemplateInputs in;
      in.messages = ordered_json::array({user("message " + std::to_string(i))});
      for (int k = 0; k < 200; ++k) results[i] = t.render(in);
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i], "<|im_start|>user\nmessage " + std::to_string(i) + "<|im_end|>\n");
  }
}

TEST(ChatTemplate, RejectsBadInputs) {
  ChatTemplateInputs in;
  in.messages = ordered_json::object();
  EXPECT_EQ(failure("x", in).message, "chat template 't': messages must be a list");
  ChatTemplateInputs clash;
  clash.extra = {{"messages", 1}};
  EXPECT_EQ(failure("x", clash).message, "chat template 't': variable 'messages' is already defined");
  clash.extra = {{"range", 1}};
  EXPECT_EQ(failure("x", clash).kind, ErrorKind::kInvalidInput);
  ChatTemplateInputs not_object;
  not_object.extra = ordered_json::array();
  EXPECT_EQ(failure("x", not_object).message, "chat template 't': extra must be an object of variables");
}

TEST(ChatTemplate, ErrorsNameConstructLineAndColumn) {
  ChatTemplateInputs one;
  one.messages = ordered_json::array({user("a")});
  Failure f = failure("{% for m in messages %}\n  {{ m.content | wordcount }}\n{% endfor %}", one);
  EXPECT_EQ(f.kind, ErrorKind::kUnsupported);
  EXPECT_EQ(f.message, "chat template 't': line 2 col 18: unsupported filter 'wordcount'");

  f = failure("\n\n{% raw %}x{% endraw %}");
  EXPECT_EQ(f.kind, ErrorKind::kUnsupported);
  EXPECT_EQ(f.message, "chat template 't': line 3 col 1: unsupported statement 'raw'");

  f = failure("{{ x is divisibleby(3) }}");
  EXPECT_EQ(f.kind, ErrorKind::kUnsupported);
  EXPECT_EQ(f.message, "chat template 't': line 1 col 20: test 'divisibleby' with arguments is not supported");

  f = failure("{{ messages.pop() }}");
  EXPECT_EQ(f.kind, ErrorKind::kUnsupported);
  EXPECT_EQ(f.message, "chat template 't': line 1 col 4: unsupported method 'pop' on list");

  f = failure("{{ lipsum() }}");
  EXPECT_EQ(f.kind, ErrorKind::kUnsupported);
  EXPECT_EQ(f.message, "chat template 't': line 1 col 4: unknown function 'lipsum'");

  f = failure("{% if x %}\n{% for y in z %}\n{% endif %}");
  EXPECT_EQ(f.kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(f.message,
            "chat template 't': line 3 col 1: '{% endif %}' found where '{% for %}' opened at line 2 col 1 expects "
            "'{% endfor %}'");

  f = failure("{{ 1 / 'a' }}");
  EXPECT_EQ(f.kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(f.message, "chat template 't': line 1 col 6: unsupported operator '/' between integer and string");

  f = failure("{% break %}");
  EXPECT_EQ(f.message, "chat template 't': line 1 col 1: 'break' outside a loop");
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplateMessage) {
  const std::string src =
      "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Unsupported role: ' + m.role) }}{% endif %}{% endfor %}";
  ChatTemplateInputs in;
  in.messages = ordered_json::array({user("a"), {{"role", "robot"}, {"content", "b"}}});
  const Failure f = failure(src, in);
  EXPECT_EQ(f.kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(f.message, "chat template 't': line 1 col 71: Unsupported role: robot");
}

TEST(ChatTemplate, LimitsStopRunawayTemplates) {
  // Unbounded recursion: the call depth limit, and the stack budget for
  // recursion through deeply nested blocks.
  ChatTemplateLimits roomy;
  roomy.max_stack_bytes = size_t{8} << 20;
  Failure f = failure("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", {}, roomy);
  EXPECT_NE(f.message.find("calls nested deeper than 64"), std::string::npos) << f.message;
  std::string nested;
  for (int i = 0; i < 150; ++i) nested += "{% if true %}";
  nested += "{{ r(n + 1) }}";
  for (int i = 0; i < 150; ++i) nested += "{% endif %}";
  f = failure("{% macro r(n) %}" + nested + "{% endmacro %}{{ r(0) }}");
  EXPECT_NE(f.message.find("template nests too deeply (more than 256 KiB of stack)"), std::string::npos)
      << f.message;
  // Output that doubles every iteration.
  ChatTemplateLimits small;
  small.max_output_bytes = 1 << 16;
  f = failure("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
              {}, small);
  EXPECT_NE(f.message.find("output larger than 65536 bytes"), std::string::npos) << f.message;
  f = failure("{% for i in range(100000) %}{{ 'xxxxxxxxxx' }}{% endfor %}", {}, small);
  EXPECT_NE(f.message.find("output larger than 65536 bytes"), std::string::npos) << f.message;
  // Printing one big string many times over, in each way a value becomes text.
  const std::string big =
      "{% set ns = namespace(s='xxxxxxxxxx', l=[]) %}{% for i in range(12) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{% set ns.l = [ns.s] %}{% for i in range(15) %}{% set ns.l = ns.l + ns.l %}{% endfor %}";
  ChatTemplateLimits mib;
  mib.max_output_bytes = 1 << 20;
  for (const char* print : {"{{ ns.l }}", "{{ ns.l|tojson }}", "{{ ns.l|join }}", "{{ 'a' ~ ns.l }}",
                            "{{ ns.l|string }}", "{{ [ns.l]|join }}"}) {
    f = failure(big + print, {}, mib);
    EXPECT_NE(f.message.find("output larger than 1048576 bytes"), std::string::npos) << print << ": " << f.message;
  }
  // Too many iterations.
  ChatTemplateLimits few;
  few.max_steps = 1000;
  f = failure("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", {}, few);
  EXPECT_NE(f.message.find("more than 1000 loop iterations and calls"), std::string::npos) << f.message;
  // Huge lists, deep values, deep expressions.
  f = failure("{{ range(1000000000) | length }}");
  EXPECT_NE(f.message.find("range() of more than 1000000 items"), std::string::npos) << f.message;
  f = failure("{% set ns = namespace(x=[]) %}{% for i in range(600) %}{% set ns.x = [ns.x] %}{% endfor %}");
  EXPECT_NE(f.message.find("value nested deeper than 512 levels"), std::string::npos) << f.message;
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  f = failure(chain + " }}");
  EXPECT_NE(f.message.find("expression nested deeper than 256 levels"), std::string::npos) << f.message;
  std::string parens = "{{ ";
  for (int i = 0; i < 5000; ++i) parens += "(";
  f = failure(parens);
  EXPECT_NE(f.message.find("nested deeper than 200 levels"), std::string::npos) << f.message;
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  f = failure(blocks);
  EXPECT_NE(f.message.find("nested deeper than 200 levels"), std::string::npos) << f.message;
}

TEST(ChatTemplate, NamespaceCyclesDoNotLeakOrHang) {
  const ChatTemplate t = ChatTemplate::parse("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns.self is defined }}",
                                             "t");
  EXPECT_EQ(t.render({}), "true");
  const Failure f = failure("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}");
  EXPECT_NE(f.message.find("nested deeper than"), std::string::npos) << f.message;
}

// Mangled versions of every construct case either render or fail with a
// tandem::Error; nothing else escapes and nothing crashes.
TEST(ChatTemplate, MangledTemplatesFailCleanly) {
  std::mt19937 rng(1234);
  const std::string pieces[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|",
                                ".", ",", ":", "=", "not ", " if ", "else", "for", "endfor", "\\", "é", "\n"};
  int rendered = 0;
  int failed = 0;
  for (const auto& c : jinja::construct_cases()) {
    for (int round = 0; round < 40; ++round) {
      std::string src = c.source;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !src.empty(); ++e) {
        const size_t at = rng() % src.size();
        if (rng() % 2 == 0) {
          src.erase(at, 1 + rng() % 3);
        } else {
          src.insert(at, pieces[rng() % std::size(pieces)]);
        }
      }
      try {
        ChatTemplateInputs in;
        in.messages = ordered_json::array({user("hi"), {{"role", "assistant"}, {"content", nullptr}}});
        ChatTemplate::parse(src, "mangled").render(in);
        ++rendered;
      } catch (const Error&) {
        ++failed;
      }
    }
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace tandem::text
