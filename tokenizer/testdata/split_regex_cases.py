# Regenerates split_regex_cases.json: random strings split by the Llama 3 and
# Qwen2 pre-tokenizer regexes and GPT-2's (ByteLevel with use_regex) with
# Python's `regex` module (a backtracking engine with lookahead and \p{..} classes, like Hugging Face's Oniguruma), so
# that the package's hand-written matchers are checked against a real engine.
# Run: python3 split_regex_cases.py > split_regex_cases.json
import json, random, regex

random.seed(7)
pools = ["abcXYZ", "  \t\n\r\u00a0\u3000\u2028\u0085", "0123٠١४²½",
         "'sSdDlLtTRrEeVvMm.,;!?-_()$\"", "日本ßé", "\u0301\u0308", "😀👍🏽\u200d", "ſΩЖ"]
llama3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
qwen2 = llama3.replace(r"\p{N}{1,3}", r"\p{N}")
gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
cases = []
for _ in range(1000):
    s = "".join(random.choice(random.choice(pools)) for _ in range(random.randint(1, 25)))
    cases.append([s, regex.findall(llama3, s), regex.findall(qwen2, s), regex.findall(gpt2, s)])
print(json.dumps(cases, ensure_ascii=False))
