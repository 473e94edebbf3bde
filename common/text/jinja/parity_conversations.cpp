#include "common/text/jinja/parity_conversations.h"

namespace tandem::text::jinja {
namespace {

constexpr const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string", "description": "City name, e.g. Zürich"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
      "required": ["location"]}}},
  {"type": "function", "function": {"name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 3}},
      "required": ["query"]}}}
])";

// Conversations without the tools; "tools": true is replaced by kTools.
constexpr const char* kConversations = R"([
  {"name": "user_only", "add_generation_prompt": true,
   "messages": [{"role": "user", "content": "Hello!"}]},
  {"name": "system_user", "add_generation_prompt": true,
   "messages": [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is 2 + 2?"}]},
  {"name": "system_user_no_prompt", "add_generation_prompt": false,
   "messages": [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is 2 + 2?"}]},
  {"name": "multi_turn", "add_generation_prompt": true,
   "messages": [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello! How can I help?"},
                {"role": "user", "content": "Tell me a joke."}]},
  {"name": "multi_turn_ends_with_assistant", "add_generation_prompt": false,
   "messages": [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Bye"},
                {"role": "assistant", "content": "Goodbye."}]},
  {"name": "think_in_content", "add_generation_prompt": true,
   "messages": [{"role": "user", "content": "What is 3 * 7?"},
                {"role": "assistant", "content": "<think>\nThree times seven.\n</think>\n\n21"},
                {"role": "user", "content": "And 3 * 8?"}]},
  {"name": "think_in_last_turn", "add_generation_prompt": false,
   "messages": [{"role": "user", "content": "What is 3 * 7?"},
                {"role": "assistant", "content": "<think>\nThree times seven.\n</think>\n\n21"}]},
  {"name": "reasoning_content_field", "add_generation_prompt": false,
   "messages": [{"role": "user", "content": "Capital of France?"},
                {"role": "assistant", "content": "Paris.", "reasoning_content": "The user asks about France.\n"}]},
  {"name": "enable_thinking_false", "add_generation_prompt": true, "extra": {"enable_thinking": false},
   "messages": [{"role": "user", "content": "Quick answer: 1 + 1?"}]},
  {"name": "enable_thinking_true", "add_generation_prompt": true, "extra": {"enable_thinking": true},
   "messages": [{"role": "user", "content": "Think about 1 + 1."}]},
  {"name": "tools_with_system", "add_generation_prompt": true, "tools": true,
   "messages": [{"role": "system", "content": "You can call tools."},
                {"role": "user", "content": "Weather in Paris?"}]},
  {"name": "tools_without_system", "add_generation_prompt": true, "tools": true,
   "messages": [{"role": "user", "content": "Weather in Paris?"}]},
  {"name": "tool_call_dict_arguments", "add_generation_prompt": true, "tools": true,
   "messages": [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                 "arguments": {"location": "Paris", "unit": "celsius"}}}]},
                {"role": "tool", "content": "{\"temperature\": 21.5}"},
                {"role": "assistant", "content": "It is 21.5 °C in Paris."},
                {"role": "user", "content": "Thanks"}]},
  {"name": "tool_call_string_arguments_null_content", "add_generation_prompt": true, "tools": true,
   "messages": [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null,
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                 "arguments": "{\"location\": \"Paris\"}"}}]},
                {"role": "tool", "content": "sunny"}]},
  {"name": "tool_call_dict_arguments_null_content", "add_generation_prompt": false, "tools": true,
   "messages": [{"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": null,
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Oslo"}}}]},
                {"role": "tool", "content": "cold"}]},
  {"name": "two_tool_calls_null_content", "add_generation_prompt": true, "tools": true,
   "messages": [{"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": null,
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
                                {"type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Rome\"}"}}]},
                {"role": "tool", "content": "sunny"},
                {"role": "tool", "content": "rainy"},
                {"role": "assistant", "content": "Paris is sunny, Rome is rainy."}]},
  {"name": "two_tool_calls_string_arguments", "add_generation_prompt": true, "tools": true,
   "messages": [{"role": "system", "content": "Use tools when needed."},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": "Let me check.",
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
                                {"type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Rome\"}"}}]},
                {"role": "tool", "content": "sunny"},
                {"role": "tool", "content": "rainy"}]},
  {"name": "three_tool_results_in_a_row", "add_generation_prompt": true, "tools": true,
   "messages": [{"role": "user", "content": "Search three things."},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"function": {"name": "search", "arguments": {"query": "a"}}},
                                {"function": {"name": "search", "arguments": {"query": "b", "top_k": 5}}},
                                {"function": {"name": "search", "arguments": {"query": "c"}}}]},
                {"role": "tool", "content": "result a"},
                {"role": "tool", "content": "result b"},
                {"role": "tool", "content": "result c"},
                {"role": "assistant", "content": "Done."},
                {"role": "user", "content": "Summarise."}]},
  {"name": "tool_arguments_with_numbers_and_unicode", "add_generation_prompt": false, "tools": true,
   "messages": [{"role": "user", "content": "Go"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "search",
                   "arguments": {"query": "naïve café ☕", "top_k": 2, "ratio": 2.5, "whole": 3.0,
                                 "flags": [true, false, null], "nested": {"2": "b", "1": "a", "k": "v"}}}}]}]},
  {"name": "unicode", "add_generation_prompt": true,
   "messages": [{"role": "system", "content": "Réponds en français 🇫🇷."},
                {"role": "user", "content": "Привет, 世界! 😀 «quote» — naïve\ttab"}]},
  {"name": "empty_content", "add_generation_prompt": true,
   "messages": [{"role": "user", "content": ""},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "Still there?"}]},
  {"name": "system_only", "add_generation_prompt": true,
   "messages": [{"role": "system", "content": "You are terse."}]},
  {"name": "two_system_messages", "add_generation_prompt": true,
   "messages": [{"role": "system", "content": "Rule one."},
                {"role": "system", "content": "Rule two."},
                {"role": "user", "content": "Go."}]},
  {"name": "whitespace_content", "add_generation_prompt": true,
   "messages": [{"role": "user", "content": "  \n padded question \n\n"},
                {"role": "assistant", "content": "\n\n  padded answer  "},
                {"role": "user", "content": "\t"}]},
  {"name": "template_syntax_in_content", "add_generation_prompt": true,
   "messages": [{"role": "user", "content": "Explain {{ x }} and {% if %} and {# c #} in Jinja."}]},
  {"name": "user_tool_response_text", "add_generation_prompt": true,
   "messages": [{"role": "user", "content": "Plan."},
                {"role": "assistant", "content": "<think>plan</think>Step 1."},
                {"role": "user", "content": "<tool_response>\nok\n</tool_response>"}]},
  {"name": "reasoning_with_tool_calls_then_user", "add_generation_prompt": true, "tools": true,
   "messages": [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "Checking.", "reasoning_content": "Need the tool.",
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Oslo"}}}]},
                {"role": "tool", "content": "cold"},
                {"role": "assistant", "content": "<think>\nIt is cold.\n</think>\n\nIt is cold in Oslo."},
                {"role": "user", "content": "Thanks!"}]}
])";

}  // namespace

const nlohmann::ordered_json& parity_conversations() {
  static const nlohmann::ordered_json conversations = [] {
    const auto tools = nlohmann::ordered_json::parse(kTools);
    auto list = nlohmann::ordered_json::parse(kConversations);
    for (auto& c : list) {
      c["tools"] = c.value("tools", false) ? tools : nlohmann::ordered_json();
      if (!c.contains("extra")) c["extra"] = nlohmann::ordered_json::object();
    }
    return list;
  }();
  return conversations;
}

}  // namespace tandem::text::jinja
