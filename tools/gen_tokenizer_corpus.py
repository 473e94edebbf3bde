#!/usr/bin/env python3
"""Writes tests/data/tokenizer_corpus.json: the strings the tokenizer parity
test encodes with Tandem and with Hugging Face's JavaScript tokenizers.

Entries are JSON strings, or {"hex": "..."} for byte strings that are not
valid UTF-8. Deterministic (fixed seed); rerun after editing the lists:
    python3 tools/gen_tokenizer_corpus.py > tests/data/tokenizer_corpus.json
"""
import json
import random

HAND = [
    "", " ", "  ", "\n", "\n\n", "\r\n", "\t", " \t \n ", "a", "Hello world",
    "Hello, world! How are you?", "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see we've done it, don't they'd?", "DON'T SHOUT, WE'LL HEAR YOU'RE HERE",
    "It's", "it'S", "rock'n'roll", "'s 't 're 've 'm 'll 'd", "O'Neil's cat", "'''quoted'''",
    "1234567890", "3.14159", "1,000,000", "2024-06-01T12:34:56Z", "+1 (555) 010-9999",
    "0x7fffffff", "1e-9", "100%", "$5.99", "12345678901234567890",
    "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); }\n",
    "const x = {a: 1, 'b': [2, 3]};", "SELECT * FROM users WHERE id = 42;",
    "<div class=\"x\">Hi &amp; bye</div>", "https://example.com/path?q=1&r=two#frag",
    "user@example.org", "C:\\Windows\\System32", "    indented\n\tTabbed\n",
    "snake_case_name camelCaseName PascalCaseName kebab-case-name",
    "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם",
    "नमस्ते दुनिया", "สวัสดีชาวโลก", "你好，世界！", "日本語のテキストです。カタカナ、ひらがな。",
    "안녕하세요 세계", "Tiếng Việt có dấu", "Ελληνικά και English mixed", "ąęółśżźćń ĄĘÓŁŚŻŹĆŃ",
    "résumé naïve café coöperate", "Straße Maße ẞ", "İstanbul ıi", "ﬁ ﬂ ﬀ ligatures",
    "e\u0301 vs \u00e9", "A\u030a \u212b \u00c5", "\u1100\u1161\u11a8 vs \uac01", "Å̈ ḍ̇ q̣̇",
    "😀😃😄😁", "👍🏽👍🏿", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag 🇯🇵🇺🇸", "❤️ ♥ ☺ ✓ ✗",
    "🫨🪿🫎 new emoji", "∑∫∂√∞≠≤≥", "→ ← ↑ ↓ ⇒", "©®™§¶†‡•", "«guillemets» „quotes“ “curly”",
    "\u00a0non\u00a0breaking\u00a0spaces\u00a0", "ideographic\u3000space", "zero\u200bwidth\u200cjoiner\u200d",
    "\ufeffBOM at start", "line\u2028separator\u2029para", "tab\tseparated\tvalues\n1\t2\t3",
    "multiple     spaces     here", "trailing spaces   ", "   leading spaces", "\n\n\nthree newlines",
    "mixed \r\n line \r endings \n", "١٢٣ ٤٥٦ Arabic-Indic digits", "१२३ Devanagari digits",
    "①②③ Ⅻ ½ ¾ ² ³", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "ＡＢＣ！？", "Ǆ ǅ ǆ title case",
    "<|im_start|>user\nhi<|im_end|>\n", "<|im_start|>system\nYou are helpful.<|im_end|>",
    "<|endoftext|>", "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>", "<｜User｜>hi<｜Assistant｜>",
    "<s>[INST] hi [/INST]</s>", "<s> <s><s>  </s>", "text<|im_end|>more<|im_start|>",
    "<|im_start", "|im_end|>", "<<|im_start|>>", "▁ ▁▁ already has metaspace",
    "Ġ Ċ byte-level lookalikes", "<0x41> literal byte token text",
    "a" * 300, " " * 200, "\n" * 50, "ab" * 150, "😀" * 40, "9" * 100,
    "The General Public License is a free, copyleft license for software and other kinds of works.",
    "  Don't  stop: 1234567 résumé — naïve café!? <|im_start|>user\nhi<|im_end|>\n",
]

FRAGMENTS = [
    "hello", "World", "don't", "WE'RE", "you'll", "it's", "42", "3.5", "1,234", "x=y+1;",
    "foo_bar", "fooBar", "(a, b)", "[1, 2]", "{\"k\": \"v\"}", "...", "!!", "?!", "--", "—", "–",
    "Привет", "мир", "κόσμε", "مرحبا", "नमस्ते", "สวัสดี", "你好", "世界", "日本語", "カタカナ", "ひらがな",
    "한국어", "café", "naïve", "Straße", "e\u0301", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "∑", "√2", "½",
    "١٢٣", "①", "ｆｕｌｌ", "\u00a0", "\u3000", "\u200b", "<|im_start|>", "<|im_end|>",
    "<｜end▁of▁sentence｜>", "<s>", "</s>", "<think>", "'s", "'LL", "123456", "0", "a", "Z",
]
SEPARATORS = ["", " ", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", " \n", "\u00a0", "   "]

INVALID_HEX = [
    "ff", "c0af", "e28228", "f09f98", "f09f9880ff", "61ff62", "ed a0 80", "c328", "80",
    "e2 82", "f4 90 80 80", "48656c6c6f c3 576f726c64", "f0 9f 98 80 f0 9f", "fe fe ff ff",
    "e0 80 af", "4869 eda080 21",
]


def main():
    rng = random.Random(20261122)
    corpus = list(HAND)
    while len(corpus) < len(HAND) + 220:
        n = rng.randint(1, 7)
        s = ""
        for i in range(n):
            if i:
                s += rng.choice(SEPARATORS)
            s += rng.choice(FRAGMENTS)
        if rng.random() < 0.15:
            s = rng.choice([" ", "\n", "  "]) + s
        if rng.random() < 0.15:
            s += rng.choice([" ", "\n", "  ", "\n\n"])
        corpus.append(s)
    corpus.extend({"hex": h.replace(" ", "")} for h in INVALID_HEX)
    print(json.dumps(corpus, ensure_ascii=False, indent=0))


if __name__ == "__main__":
    main()
