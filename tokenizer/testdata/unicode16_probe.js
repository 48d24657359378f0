// Lists the code points Hugging Face's split regexes class as \p{L} or \p{N} and
// Go's unicode tables (Unicode 15.0) do not, for unicode16.go:
//   go run (a program printing every code point Go does not class as L or N) > /tmp/notLN.txt
//   npm install tokenizers@0.23.2 && node unicode16_probe.js > probe.json
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
(async () => {
  const tok = Tokenizer.fromFile('/work/shared/data/tokenizers/llama3/tokenizer.json');
  const slash = tok.tokenToId('/a');
  const cands = fs.readFileSync('/tmp/notLN.txt', 'utf8').trim().split('\n').map(Number)
    .filter(c => /[\p{L}\p{N}]/u.test(String.fromCodePoint(c)));
  const L = [], N = [];
  for (const c of cands) {
    const ch = String.fromCodePoint(c);
    const e = await tok.encode(ch + '/a', null, { addSpecialTokens: false });
    const ids = e.getIds();
    if (ids[ids.length - 1] !== slash) continue; // HF's engine does not know it: "other"
    (/\p{L}/u.test(ch) ? L : N).push(c);
  }
  console.log(JSON.stringify({ candidates: cands.length, L, N }));
})();
