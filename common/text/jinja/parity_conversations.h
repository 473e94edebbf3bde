// The conversations the parity test renders with every real chat template:
// system and user turns, multi-turn, reasoning (<think> in the content and
// reasoning_content), tool definitions, tool calls with arguments as a dict
// and as a JSON string, several tool results in a row, the generation prompt
// on and off, enable_thinking, unicode, empty and whitespace-only content.
// Each is a JSON object with "name", "messages", "tools", "add_generation_prompt"
// and "extra" (bos_token / eos_token come from the model's tokenizer_config).
#pragma once

#include <nlohmann/json.hpp>

namespace tandem::text::jinja {

const nlohmann::ordered_json& parity_conversations();

}  // namespace tandem::text::jinja
