// The value model: printing, truthiness, equality, JSON in and out.
#include "common/text/jinja/value.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/text/jinja/json.h"

namespace tandem::text::jinja {
namespace {

using nlohmann::ordered_json;

Value from(const char* json) { return from_json(ordered_json::parse(json), "test"); }

TEST(Value, PrintsAsTheReference) {
  EXPECT_EQ(to_output(Value(3)), "3");
  EXPECT_EQ(to_output(Value(1.0)), "1.0");
  EXPECT_EQ(to_output(Value(-0.0)), "-0.0");
  EXPECT_EQ(to_output(Value(2.5)), "2.5");
  EXPECT_EQ(to_output(Value(1e20)), "100000000000000000000.0");
  EXPECT_EQ(to_output(Value(1e21)), "1e+21");
  EXPECT_EQ(to_output(Value(true)), "true");
  EXPECT_EQ(to_output(Value::none()), "null");
  EXPECT_EQ(to_output(Value()), "undefined");
  EXPECT_EQ(to_output(Value(int64_t{9007199254740993})), "9007199254740992");
  EXPECT_EQ(to_output(from(R"([1, "a", null, {"k": [true]}])")), R"([1, "a", null, {"k": [true]}])");
  EXPECT_EQ(to_output(Value::list({Value(), Value(1)})), "[undefined, 1]");
  EXPECT_THROW(to_output(Value::tuple({Value(1)})), EvalError);
}

TEST(Value, StringFormsForConcatenation) {
  EXPECT_EQ(to_js_string(Value(1.0)), "1");
  EXPECT_EQ(to_js_string(Value(2.5)), "2.5");
  EXPECT_EQ(to_js_string(from(R"([1, [2, 3], {"a": null}])")), R"(1,[2, 3],{"a": null})");
  EXPECT_EQ(to_js_string(from(R"({"a": 1})")), "[object Map]");
}

TEST(Value, Truthiness) {
  EXPECT_FALSE(truthy(Value()));
  EXPECT_FALSE(truthy(Value::none()));
  EXPECT_FALSE(truthy(Value(0)));
  EXPECT_FALSE(truthy(Value(0.0)));
  EXPECT_FALSE(truthy(Value(std::nan(""))));
  EXPECT_FALSE(truthy(Value("")));
  EXPECT_FALSE(truthy(from("[]")));
  EXPECT_FALSE(truthy(from("{}")));
  EXPECT_TRUE(truthy(Value::namespace_of(Dict())));  // as in the reference
  EXPECT_TRUE(truthy(Value(" ")));
  EXPECT_TRUE(truthy(from("[0]")));
}

TEST(Value, LooseAndStrictEquality) {
  EXPECT_TRUE(loose_equals(Value("1"), Value(1)));
  EXPECT_TRUE(loose_equals(Value(true), Value(1)));
  EXPECT_TRUE(loose_equals(Value(1), Value(1.0)));
  EXPECT_TRUE(loose_equals(Value::none(), Value()));
  EXPECT_TRUE(loose_equals(Value(""), Value(0)));
  EXPECT_FALSE(loose_equals(Value("a"), Value(0)));
  EXPECT_FALSE(loose_equals(Value::none(), Value(0)));
  const Value list = from("[1]");
  EXPECT_TRUE(loose_equals(list, list));
  EXPECT_FALSE(loose_equals(list, from("[1]")));  // identity, as JavaScript objects
  EXPECT_TRUE(loose_equals(list, Value("1")));     // [1] == "1" in JavaScript
  EXPECT_TRUE(strict_equals(Value(1), Value(1.0)));
  EXPECT_FALSE(strict_equals(Value("1"), Value(1)));
  EXPECT_FALSE(strict_equals(Value(true), Value(1)));
}

TEST(Json, InputsAreSeenAsJavaScriptSeesThem) {
  const Value v = from(R"({"b": 1, "10": 2, "a": 2.0, "2": 3.5, "01": 4, "-1": 5})");
  std::vector<std::string> keys;
  for (const auto& [k, _] : v.as_dict().entries()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"2", "10", "b", "a", "01", "-1"}));
  EXPECT_TRUE(v.as_dict().find("a")->is_int());  // 2.0 is the integer 2
  EXPECT_TRUE(v.as_dict().find("2")->is_float());
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "[";
  for (int i = 0; i < 300; ++i) deep += "]";
  EXPECT_THROW(from(deep.c_str()), Error);
}

TEST(Json, ToJsonOptions) {
  const Value v = from(R"({"b": [1, 2.5, "é"], "a": {}, "c": []})");
  EXPECT_EQ(to_json(v, {}, true), R"({"b": [1, 2.5, "é"], "a": {}, "c": []})");
  JsonOptions indent;
  indent.indent = 2;
  EXPECT_EQ(to_json(v, indent, true), "{\n  \"b\": [\n    1,\n    2.5,\n    \"é\"\n  ],\n  \"a\": {},\n  \"c\": []\n}");
  JsonOptions compact;
  compact.separators = std::make_pair(",", ":");
  compact.ensure_ascii = true;
  EXPECT_EQ(to_json(v, compact, true), R"({"b":[1,2.5,"\u00e9"],"a":{},"c":[]})");
  JsonOptions sorted;
  sorted.sort_keys = true;
  EXPECT_EQ(to_json(from(R"({"b": 1, "_x": 2, "A": 3, "a": 4, "1": 5})"), sorted, true),
            R"({"_x": 2, "1": 5, "a": 4, "A": 3, "b": 1})");
  EXPECT_EQ(to_json(Value::list({Value()}), {}, true), "[null]");
  EXPECT_EQ(to_json(Value(std::nan("")), {}, true), "null");
  JsonOptions negative;
  negative.indent = -1;
  EXPECT_THROW(to_json(v, negative, true), EvalError);
}

TEST(Value, NestingIsBounded) {
  Value v = Value::list({});
  for (int i = 1; i < kMaxValueDepth; ++i) v = Value::list({v});
  EXPECT_EQ(v.depth(), kMaxValueDepth);
  EXPECT_THROW(Value::list({v}), EvalError);
  Dict d;
  EXPECT_THROW(d.set("k", v), EvalError);
  // A namespace that holds itself is caught when printed.
  Value ns = Value::namespace_of(Dict());
  for (int i = 0; i < kMaxValueDepth - 1; ++i) ns.mutable_namespace().set("self", ns);
  EXPECT_THROW(ns.mutable_namespace().set("self", ns), EvalError);
  ns.mutable_namespace().clear();  // break the cycle
}

TEST(Dict, KeepsInsertionOrderAndPositionOnUpdate) {
  Dict d;
  for (int i = 0; i < 20; ++i) d.set("k" + std::to_string(i), Value(i));
  d.set("k3", Value("x"));
  EXPECT_EQ(d.size(), 20u);
  EXPECT_EQ(d.entries()[3].first, "k3");
  EXPECT_EQ(d.find("k3")->as_string(), "x");
  EXPECT_EQ(d.find("k19")->as_int(), 19);
  EXPECT_EQ(d.find("nope"), nullptr);
}

}  // namespace
}  // namespace tandem::text::jinja
