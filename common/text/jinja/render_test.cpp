// Every construct case (construct_cases.cpp): our rendering equals what
// @huggingface/jinja rendered, or, where it fails, we fail with a message
// that names the construct.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/text/jinja/chat_template.h"
#include "common/text/jinja/construct_cases.h"

namespace tandem::text::jinja {
namespace {

ChatTemplateInputs inputs_from(const char* context) {
  const auto j = nlohmann::ordered_json::parse(context);
  ChatTemplateInputs in;
  if (j.contains("messages")) in.messages = j["messages"];
  if (j.contains("tools")) in.tools = j["tools"];
  in.add_generation_prompt = j.value("add_generation_prompt", false);
  in.bos_token = j.value("bos_token", "");
  in.eos_token = j.value("eos_token", "");
  if (j.contains("extra")) in.extra = j["extra"];
  return in;
}

class ConstructTest : public ::testing::TestWithParam<ConstructCase> {};

TEST_P(ConstructTest, RendersAsReference) {
  const ConstructCase& c = GetParam();
  std::string rendered;
  std::string error;
  try {
    rendered = ChatTemplate::parse(c.source, c.name).render(inputs_from(c.context));
  } catch (const Error& e) {
    error = e.what();
  }
  if (c.ok) {
    EXPECT_EQ(error, "");
    EXPECT_EQ(rendered, c.expected);
  } else {
    ASSERT_NE(error, "") << "rendered " << rendered;
    EXPECT_NE(error.find(std::string("chat template '") + c.name + "': line "), std::string::npos) << error;
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ConstructTest, ::testing::ValuesIn(construct_cases()),
                         [](const ::testing::TestParamInfo<ConstructCase>& p) { return p.param.name; });

}  // namespace
}  // namespace tandem::text::jinja
